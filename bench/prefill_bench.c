/* prefill_bench: prompt processing on a loaded machine, for A/B comparisons
 * of the batched (many-token) matmul paths:
 *
 *   prefill_bench MODEL [tokens] [ubatch] [threads] [reps]
 *                 (defaults 512 tokens, ubatch 512, 1 thread, 3 reps)
 *
 * Processes `tokens` prompt tokens from an empty cache in forwards of up to
 * `ubatch` tokens (the last token's logits only, as llama-bench -p) and
 * prints the fastest of `reps` in wall-clock and in the process's CPU time
 * (with one thread the CPU time is what another process's load cannot
 * stretch much; with two, wall time is what a user sees). `specula
 * bench-forward --prefill` is the figure to publish; this one is for perf
 * and quick A/B runs (tokens/s of CPU time are per thread-second). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "clock.h"

#include "sp_model.h"

static double proc_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: prefill_bench MODEL [tokens] [ubatch] [threads] [reps]\n");
        return 2;
    }
    const int n_tok = argc > 2 ? atoi(argv[2]) : 512, ub = argc > 3 ? atoi(argv[3]) : 512;
    const int threads = argc > 4 ? atoi(argv[4]) : 1, reps = argc > 5 ? atoi(argv[5]) : 3;
    if (n_tok < 1 || n_tok > 8192 || ub < 1 || ub > 8192 || threads < 1 || threads > 64 || reps < 1 ||
        reps > 1000) {
        fprintf(stderr, "prefill_bench: tokens 1..8192, ubatch 1..8192, threads 1..64, reps 1..1000\n");
        return 2;
    }
    sp_error err = {0};
    sp_model *m = NULL;
    sp_ctx *c = NULL;
    if (sp_model_load(argv[1], NULL, &m, &err)) {
        fprintf(stderr, "prefill_bench: %s\n", err.msg);
        return 1;
    }
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = n_tok + 1;
    p.n_threads = threads;
    p.max_batch = ub < n_tok ? ub : n_tok;
    if (sp_ctx_init(m, &p, &c, &err)) {
        fprintf(stderr, "prefill_bench: %s\n", err.msg);
        sp_model_free(m);
        return 1;
    }
    const int32_t nv = sp_model_cfg(m)->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)nv);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_tok);
    if (!logits || !tok) return 1;
    for (int32_t i = 0; i < n_tok; i++) tok[i] = 3 + (int32_t)(((int64_t)i * 7919) % (nv > 4 ? nv - 3 : 1));
    double best_w = 1e30, best_c = 1e30;
    for (int r = 0; r <= reps; r++) { /* rep 0: warm-up */
        if (sp_ctx_truncate(c, 0, &err)) return 1;
        const double w0 = sp_now(), c0 = proc_cpu_now();
        for (int done = 0; done < n_tok;) {
            const int n = n_tok - done < p.max_batch ? n_tok - done : p.max_batch;
            sp_batch b = {.tokens = tok + done, .n = n};
            if (sp_forward(c, &b, logits, &err)) {
                fprintf(stderr, "prefill_bench: %s\n", err.msg);
                return 1;
            }
            done += n;
        }
        const double tw = sp_now() - w0, tc = proc_cpu_now() - c0;
        if (r == 0) continue;
        best_w = tw < best_w ? tw : best_w;
        best_c = tc < best_c ? tc : best_c;
    }
    printf("%s: prefill %d in forwards of %d, %d thread(s): %.1f tok/s wall (%.1f ms), %.1f tok/s per CPU "
           "second\n",
           sp_model_desc(m), n_tok, p.max_batch, threads, n_tok / best_w, 1e3 * best_w, n_tok / best_c);
    free(logits);
    free(tok);
    sp_ctx_free(c);
    sp_model_free(m);
    return 0;
}
