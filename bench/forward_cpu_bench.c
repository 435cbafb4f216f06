/* forward_cpu_bench: the cost of verifying k tokens relative to one, on one
 * thread, measured in the thread's CPU time so that a machine shared with
 * other processes (time-slicing) does not distort it:
 *
 *   forward_cpu_bench MODEL [reps] [depth]     (defaults 9 reps, depth 128)
 *
 * After `depth` cached tokens, one forward over k = 1, 2, 4, 8, 16 new
 * tokens (all logits), the cache truncated back after each; prints the
 * fastest of `reps` per k and its ratio to k = 1. `specula bench-forward`
 * is the wall-clock measure (and the memory bound); this one is for A/B
 * comparisons when the machine is not quiet (memory traffic of other
 * processes still slows it). */
#include <stdio.h>
#include <stdlib.h>
#include "clock.h"

#include "sp_model.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: forward_cpu_bench MODEL [reps] [depth]\n");
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 9, depth = argc > 3 ? atoi(argv[3]) : 128;
    if (reps < 1 || reps > 1000 || depth < 0 || depth > 4096) {
        fprintf(stderr, "forward_cpu_bench: reps must be 1..1000 and depth 0..4096\n");
        return 2;
    }
    enum { KMAX = 16 };
    sp_error err = {0};
    sp_model *m = NULL;
    sp_ctx *c = NULL;
    if (sp_model_load(argv[1], NULL, &m, &err)) {
        fprintf(stderr, "forward_cpu_bench: %s\n", err.msg);
        return 1;
    }
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = depth + KMAX + 16;
    p.n_threads = 1;
    p.max_batch = KMAX > depth ? KMAX : depth;
    if (p.max_batch < 1) p.max_batch = 1;
    if (sp_ctx_init(m, &p, &c, &err)) {
        fprintf(stderr, "forward_cpu_bench: %s\n", err.msg);
        sp_model_free(m);
        return 1;
    }
    const int32_t nv = sp_model_cfg(m)->n_vocab;
    const int32_t nmax = p.max_batch;
    float *logits = malloc(sizeof(float) * (size_t)nv * (size_t)nmax);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)nmax);
    if (!logits || !tok) return 1;
    for (int32_t i = 0; i < nmax; i++) tok[i] = 1 + (i * 7) % (nv > 1 ? nv - 1 : 1);
    if (depth > 0) {
        sp_batch b = {.tokens = tok, .n = depth};
        if (sp_forward(c, &b, logits, &err)) {
            fprintf(stderr, "forward_cpu_bench: %s\n", err.msg);
            return 1;
        }
    }
    printf("%s, one thread, depth %d, thread CPU time, fastest of %d\n", sp_model_desc(m), depth, reps);
    printf("%4s %10s %8s\n", "k", "ms", "vs k=1");
    const int ks[] = {1, 2, 4, 8, 16};
    double t1 = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            sp_batch b = {.tokens = tok, .n = ks[ki], .logits_all = true};
            const double t0 = sp_thread_cpu_now();
            if (sp_forward(c, &b, logits, &err)) {
                fprintf(stderr, "forward_cpu_bench: %s\n", err.msg);
                return 1;
            }
            const double t = sp_thread_cpu_now() - t0;
            best = t < best ? t : best;
            if (sp_ctx_truncate(c, depth, &err)) return 1;
        }
        if (ki == 0) t1 = best;
        printf("%4d %10.3f %8.2f\n", ks[ki], best * 1e3, best / t1);
    }
    free(logits);
    free(tok);
    sp_ctx_free(c);
    sp_model_free(m);
    return 0;
}
