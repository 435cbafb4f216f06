/* matmul_bench: one thread, every matmul kernel this CPU runs (each ISA
 * tier up to the best; "-pk": over packed weights, see ops.h), per
 * weight type, in llm.c's dev/ style:
 *
 *   matmul_bench [stream_mb] [k] [types]   (defaults 1024 MB, k = 4096, all;
 *                                           types: comma-separated, e.g. q8_0,q4_K)
 *
 * "hot": a 1 MiB weight matrix (in L2) multiplied by n = 1, 8, 16 activation
 * rows, repeated for ~0.2 s: the kernel's arithmetic rate in GMAC/s (what
 * decides verification cost and whether decode can reach the memory
 * bound). "stream": one pass over stream_mb MB of weights with n = 1 (weights
 * in DRAM): GB/s of weights, to set against `specula bench-forward`'s
 * one-thread bound; and the same pass with n = 8 (GMAC/s: verification
 * with the weights coming from memory). The matrix rows are copies of one quantised random row
 * (the kernels' time does not depend on the values). Times are the thread's
 * CPU time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clock.h"

#include "ops.h"
#include "quant.h"
#include "rng.h"

static double run(sp_mm_kernel kern, sp_mm *m, int64_t rows, double min_s, long *reps_out) {
    long reps = 0;
    double t0 = sp_thread_cpu_now(), t;
    do {
        kern(m, 0, rows);
        reps++;
        t = sp_thread_cpu_now() - t0;
    } while (t < min_s);
    *reps_out = reps;
    return t / (double)reps;
}

int main(int argc, char **argv) {
    const double stream_mb = argc > 1 ? atof(argv[1]) : 1024;
    const int64_t k = argc > 2 ? atoll(argv[2]) : 4096;
    if (!(stream_mb >= 1 && stream_mb <= 65536) || k < 256 || k % 256 || k > (1 << 20)) {
        fprintf(stderr, "usage: matmul_bench [stream_mb 1..65536] [k: a multiple of 256]\n");
        return 2;
    }
    const sp_ggml_type types[] = {SP_GGML_F32,  SP_GGML_F16,  SP_GGML_BF16, SP_GGML_Q8_0,   SP_GGML_Q4_0,
                                  SP_GGML_Q4_1, SP_GGML_Q5_0, SP_GGML_Q5_1, SP_GGML_IQ4_NL, SP_GGML_Q4_K,
                                  SP_GGML_Q5_K, SP_GGML_Q6_K, SP_GGML_IQ4_XS};
    enum { NMAX = 16 };
    const int ns[3] = {1, 8, 16};
    sp_rng rng;
    sp_rng_seed(&rng, 1);
    float *x = malloc((size_t)(NMAX * k) * sizeof(float)), *row = malloc((size_t)k * sizeof(float));
    if (!x || !row) return 1;
    for (int64_t i = 0; i < NMAX * k; i++) x[i] = (float)sp_rng_normal(&rng);
    for (int64_t i = 0; i < k; i++) row[i] = (float)sp_rng_normal(&rng) * 0.05f;
    printf("k %lld, hot matrix 1 MiB, stream matrix %.0f MB, one thread\n", (long long)k, stream_mb);
    printf("%-6s %-10s %10s %10s %10s %12s %14s\n", "type", "isa", "n=1 GMAC/s", "n=8", "n=16", "stream GB/s",
           "stream n=8 GMAC/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const sp_ggml_type t = types[ti];
        if (argc > 3) { /* only the listed types */
            char list[256];
            snprintf(list, sizeof list, ",%s,", argv[3]);
            char want[32];
            snprintf(want, sizeof want, ",%s,", sp_ggml_type_name(t));
            if (!strstr(list, want)) continue;
        }
        const size_t rb = sp_ggml_row_size(t, k);
        const int64_t hot_rows = (1 << 20) / (int64_t)rb < 16 ? 16 : (1 << 20) / (int64_t)rb;
        const int64_t st_rows = (int64_t)(stream_mb * 1e6 / (double)rb);
        if (st_rows > (4 << 20)) continue;
        uint8_t *w = malloc(rb * (size_t)(st_rows > hot_rows ? st_rows : hot_rows));
        float *y = malloc(sizeof(float) * (size_t)NMAX * (size_t)(st_rows > hot_rows ? st_rows : hot_rows));
        if (!w || !y) return 1;
        sp_quantize_row(t, row, w, k);
        for (int64_t r = 1; r < (st_rows > hot_rows ? st_rows : hot_rows); r++) memcpy(w + r * rb, w, rb);
        /* activation rows in the kernel's layout */
        const bool q8 = sp_ops_act_is_q8(t);
        const size_t as = q8 ? sp_ops_act_bytes(t, k) : (size_t)k * sizeof(float);
        uint8_t *act = aligned_alloc(64, as * NMAX);
        if (!act) return 1;
        for (int n = 0; n < NMAX; n++) {
            if (q8) sp_ops_act_prepare(t, x + n * k, k, act + n * as);
            else memcpy(act + n * as, x + n * k, (size_t)k * sizeof(float));
        }
        /* the packable types also in the packed layout (ops.h), stream rows included */
        const int64_t all_rows = st_rows > hot_rows ? st_rows : hot_rows;
        uint8_t *pk = NULL;
        if (sp_ops_packable(t)) {
            pk = aligned_alloc(64, sp_ops_pack_bytes(t, all_rows, k));
            if (!pk) return 1;
            sp_ops_pack(t, w, rb, all_rows, k, pk);
        }
        for (int v = 0; v < 2 * ((int)sp_ops_best_isa() + 1); v++) {
            const int isa = v / 2, packed = v % 2;
            sp_mm_kernel kern = packed ? (pk ? sp_ops_mm_packed_isa(t, (sp_isa)isa) : NULL)
                                       : sp_ops_mm_isa(t, (sp_isa)isa);
            if (!kern) continue;
            const uint8_t *wm = packed ? pk : w;
            const size_t ws = packed ? sp_ops_pack_stride(t, k) : rb;
            double gmac[3];
            long reps;
            for (int j = 0; j < 3; j++) {
                sp_mm m = {.wtype = t, .w = wm, .w_stride = ws, .k = k, .x = act, .x_stride = as,
                           .n = ns[j], .y = y, .ld_y = hot_rows};
                double s = run(kern, &m, hot_rows, isa == 0 ? 0.05 : 0.2, &reps);
                gmac[j] = (double)hot_rows * (double)k * ns[j] / s / 1e9;
            }
            char buf[32] = "-", buf8[32] = "-"; /* the scalar tier skips the long passes */
            if (isa) {
                sp_mm m = {.wtype = t, .w = wm, .w_stride = ws, .k = k, .x = act, .x_stride = as, .n = 1,
                           .y = y, .ld_y = st_rows};
                kern(&m, 0, st_rows); /* pages in */
                double s = run(kern, &m, st_rows, 0.0, &reps);
                snprintf(buf, sizeof buf, "%.1f", (double)st_rows * (double)rb / s / 1e9);
                m.n = 8; /* verification-sized batch over weights streamed from memory */
                s = run(kern, &m, st_rows, 0.0, &reps);
                snprintf(buf8, sizeof buf8, "%.1f", (double)st_rows * (double)k * 8 / s / 1e9);
            }
            char name[24];
            snprintf(name, sizeof name, "%s%s", sp_ops_isa_name((sp_isa)isa), packed ? "-pk" : "");
            printf("%-6s %-10s %10.1f %10.1f %10.1f %12s %14s\n", sp_ggml_type_name(t), name, gmac[0], gmac[1],
                   gmac[2], buf, buf8);
            fflush(stdout);
        }
        free(w);
        free(pk);
        free(y);
        free(act);
    }
    free(x);
    free(row);
    return 0;
}
