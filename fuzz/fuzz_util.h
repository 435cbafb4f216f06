/* fuzz_util.h: shared helpers of the libFuzzer harnesses (fuzz/README.md).
 * Loaders take paths (they mmap), so an input is written to one scratch file
 * per process and loaded from there. */
#ifndef SP_FUZZ_UTIL_H
#define SP_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes data to this process's scratch file (created on first use in
 * $TMPDIR, removed at exit) and returns its path. */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *tag) {
    static char path[2][256];
    static int made[2];
    int slot = tag[0] == 'b';
    if (!made[slot]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path[slot], sizeof path[slot], "%s/specula-fuzz-%s-%d", tmp && *tmp ? tmp : "/tmp", tag,
                 (int)getpid());
        made[slot] = 1;
    }
    FILE *f = fopen(path[slot], "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path[slot];
}

/* Path under the shared directory ($SPECULA_SHARED or ../shared). */
static inline const char *fuzz_shared(const char *rel) {
    static char buf[512];
    const char *root = getenv("SPECULA_SHARED");
    snprintf(buf, sizeof buf, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

#endif
