/* sysinfo: CPU name, kernel ISA and measured read bandwidth (sp_sysinfo.h). */
#include "dev/sp_sysinfo.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops.h"
#include "clock.h"
#include "threadpool.h"

const char *sp_sysinfo_isa(void) { return sp_ops_isa_name(sp_ops_isa()); }

const char *sp_sysinfo_cpu(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(buf, cap, "%s", v);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
    return buf;
}

size_t sp_sysinfo_llc_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            unsigned long long v = strtoull(buf, &end, 10);
            if (*end == 'K') v <<= 10;
            else if (*end == 'M') v <<= 20;
            else if (*end == 'G') v <<= 30;
            if (v > best) best = (size_t)v;
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (!best) {
        long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (v > 0) best = (size_t)v;
    }
#endif
    return best;
}

typedef struct bw_job {
    const uint8_t *buf;
    size_t bytes;
    uint64_t sink[64]; /* one per thread, keeps the loads alive */
} bw_job;

/* Thread ith reads its contiguous slice (256-byte aligned) with the active
 * ISA's widest loads (ops.h: sp_ops_read_sum). */
static void bw_read(void *arg, int ith, int nth) {
    bw_job *j = arg;
    size_t lo = (j->bytes * (size_t)ith / (size_t)nth) & ~(size_t)255;
    size_t hi = (j->bytes * (size_t)(ith + 1) / (size_t)nth) & ~(size_t)255;
    j->sink[ith & 63] += sp_ops_read_sum(j->buf + lo, hi - lo);
}

sp_status sp_sysinfo_read_bandwidth(int n_threads, size_t bytes, int reps, double *gb_s,
                                    sp_error *err) {
    *gb_s = 0;
    if (n_threads < 1 || n_threads > 64)
        return sp_fail(err, SP_ERR_ARG, "bandwidth threads must be in [1, 64], got %d", n_threads);
    if (bytes < (1u << 20) || reps < 1)
        return sp_fail(err, SP_ERR_ARG, "bandwidth buffer must be at least 1 MB and reps at least 1");
    sp_status st = sp_ops_init(err);
    if (st) return st;
    sp_pool *pool = NULL;
    st = sp_pool_init(n_threads, &pool, err);
    if (st) return st;
    bw_job *j = calloc(1, sizeof *j);
    uint64_t *buf = NULL;
    if (!j || posix_memalign((void **)&buf, 4096, bytes)) {
        free(j);
        sp_pool_free(pool);
        return sp_fail(err, SP_ERR_NOMEM, "no memory for a %zu MB bandwidth buffer", bytes >> 20);
    }
    /* distinct values (no zero-page sharing), every page faulted in */
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    j->buf = (const uint8_t *)buf;
    j->bytes = bytes;
    sp_pool_run(pool, bw_read, j);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = sp_now();
        sp_pool_run(pool, bw_read, j);
        double dt = sp_now() - t0;
        if (dt > 0 && (double)bytes / dt / 1e9 > best) best = (double)bytes / dt / 1e9;
    }
    free(buf);
    free(j);
    sp_pool_free(pool);
    *gb_s = best;
    return SP_OK;
}
