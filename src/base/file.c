/* file: regular-file checks, whole-file mapping and reading (SHA-256 of a
 * file is in sha256.c). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

sp_status sp_file_open(const char *path, const char *what, int *fd, uint64_t *size, sp_error *err) {
    *fd = -1;
    *size = 0;
    if (!path || !*path) return sp_fail(err, SP_ERR_ARG, "no %s path given", what);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f < 0) return sp_fail(err, SP_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return sp_fail(err, SP_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return sp_fail(err, SP_ERR_IO, "%s %s is %s", what, path,
                       S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(f);
        return sp_fail(err, SP_ERR_IO, "cannot open %s %s: %s", what, path, strerror(e));
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    return SP_OK;
}

sp_status sp_file_map_open(const char *path, const char *what, uint64_t min_size, sp_file_map *out,
                           sp_error *err) {
    memset(out, 0, sizeof *out);
    int fd;
    uint64_t size;
    sp_status st = sp_file_open(path, what, &fd, &size, err);
    if (st) return st;
    if (size < min_size || size > (uint64_t)SIZE_MAX) {
        close(fd);
        return sp_fail(err, SP_ERR_FORMAT, "%s %s is too small (%llu bytes)", what, path,
                       (unsigned long long)size);
    }
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        int e = errno;
        close(fd);
        if (p == MAP_FAILED)
            return sp_fail(err, SP_ERR_IO, "cannot map %s %s: %s", what, path, strerror(e));
        out->data = p;
    } else {
        close(fd);
    }
    out->size = size;
    return SP_OK;
}

void sp_file_unmap(sp_file_map *m) {
    if (m->data) munmap((void *)m->data, (size_t)m->size);
    memset(m, 0, sizeof *m);
}

sp_status sp_file_read(const char *path, const char *what, uint64_t max_bytes, char **buf,
                       size_t *len, sp_error *err) {
    *buf = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    sp_status st = sp_file_open(path, what, &fd, &size, err);
    if (st) return st;
    if (size > max_bytes) {
        close(fd);
        return sp_fail(err, SP_ERR_RANGE, "%s %s is too large (%llu bytes, limit %llu)", what, path,
                       (unsigned long long)size, (unsigned long long)max_bytes);
    }
    char *b = malloc((size_t)size + 1);
    if (!b) {
        close(fd);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory reading %s %s", what, path);
    }
    size_t n = 0;
    while (n < size) {
        ssize_t r = read(fd, b + n, (size_t)size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(b);
            return sp_fail(err, SP_ERR_IO, "cannot read %s %s: %s", what, path, strerror(e));
        }
        if (r == 0) break; /* the file shrank: take what is there */
        n += (size_t)r;
    }
    close(fd);
    b[n] = 0;
    *buf = b;
    *len = n;
    return SP_OK;
}

sp_status sp_file_map_resident(const sp_file_map *m, bool prefault, bool lock, const char *what,
                               sp_error *err) {
    if (!m->data || !m->size) return SP_OK;
    if (prefault) {
        const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
        (void)madvise((void *)(uintptr_t)m->data, (size_t)m->size, MADV_WILLNEED);
        volatile uint8_t sink = 0;
        for (uint64_t off = 0; off < m->size; off += (uint64_t)page) sink ^= m->data[off];
        (void)sink;
    }
    if (lock && mlock(m->data, (size_t)m->size) != 0) {
        int e = errno;
        struct rlimit rl = {0};
        getrlimit(RLIMIT_MEMLOCK, &rl);
        if (rl.rlim_cur != RLIM_INFINITY)
            return sp_fail(err, SP_ERR_RANGE,
                           "cannot lock the %s in memory (%.1f MB): %s; RLIMIT_MEMLOCK allows %.1f MB "
                           "(raise it, e.g. ulimit -l unlimited, or do not ask for mlock)",
                           what, (double)m->size / 1e6, strerror(e), (double)rl.rlim_cur / 1e6);
        return sp_fail(err, SP_ERR_RANGE, "cannot lock the %s in memory (%.1f MB): %s", what,
                       (double)m->size / 1e6, strerror(e));
    }
    return SP_OK;
}
