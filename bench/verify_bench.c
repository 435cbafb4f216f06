/* verify_bench: time per verifier call at a realistic vocabulary
 * (V = 128k, gamma = 8 by default; `verify_bench [V] [gamma] [calls]`),
 * including input validation. Prints one line per verifier. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "verify.h"

/* Zipf-like row with a random permutation-free perturbation. */
static void make_row(float *row, int32_t V, sp_rng *r) {
    double s = 0;
    for (int32_t i = 0; i < V; i++) {
        double w = exp(-1.1 * log(1.0 + i) + 0.5 * sp_rng_normal(r));
        row[i] = (float)w;
        s += w;
    }
    for (int32_t i = 0; i < V; i++) row[i] = (float)(row[i] / s);
}

int main(int argc, char **argv) {
    int32_t V = argc > 1 ? atoi(argv[1]) : 128000;
    int32_t G = argc > 2 ? atoi(argv[2]) : 8;
    int calls = argc > 3 ? atoi(argv[3]) : 200;
    if (V < 2 || G < 1 || G > SP_VERIFY_MAX_GAMMA || calls < 1) {
        fprintf(stderr, "usage: verify_bench [V>=2] [gamma 1..64] [calls>=1]\n");
        return 2;
    }
    float *p = malloc(sizeof(float) * (size_t)(G + 1) * V), *q = malloc(sizeof(float) * (size_t)G * V);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)G);
    sp_rng rng;
    sp_rng_seed(&rng, 1);
    for (int32_t i = 0; i <= G; i++) make_row(p + (size_t)i * V, V, &rng);
    for (int32_t i = 0; i < G; i++) {
        make_row(q + (size_t)i * V, V, &rng);
        x[i] = (int32_t)sp_rng_below(&rng, 64); /* high-probability tokens */
    }
    sp_verify_ws *ws;
    sp_error e;
    if (sp_verify_ws_init(V, &ws, &e)) {
        fprintf(stderr, "verify_bench: %s\n", e.msg);
        return 1;
    }
    static const sp_verifier vs[] = {SP_VERIFIER_TOKEN, SP_VERIFIER_BLOCK, SP_VERIFIER_GREEDY};
    long acc = 0;
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        double t0 = sp_now();
        for (int c = 0; c < calls; c++) {
            sp_verify_result r;
            if (sp_verify_chain(ws, vs[k], 1.0, G, x, q, p, &rng, &r, &e)) {
                fprintf(stderr, "verify_bench: %s\n", e.msg);
                return 1;
            }
            acc += r.n_accepted;
        }
        double dt = (sp_now() - t0) / calls;
        printf("%-8s V=%d gamma=%d: %.3f ms/call\n", sp_verifier_name(vs[k]), (int)V, (int)G, dt * 1e3);
    }
    {
        double t0 = sp_now();
        int32_t idx, tok;
        for (int c = 0; c < calls; c++) {
            if (sp_verify_mc(ws, SP_MC_NOREPLACE, 4, x, q, p, &rng, &idx, &tok, &e)) {
                fprintf(stderr, "verify_bench: %s\n", e.msg);
                return 1;
            }
            acc += idx;
        }
        printf("%-8s V=%d k=4: %.3f ms/call\n", "mc-norep", (int)V, (sp_now() - t0) / calls * 1e3);
    }
    {
        double t0 = sp_now();
        for (int c = 0; c < calls; c++)
            if (sp_verify_check_row(p, V, "p", &e)) return 1;
        printf("%-8s V=%d: %.3f ms/row\n", "validate", (int)V, (sp_now() - t0) / calls * 1e3);
    }
    printf("(checksum %ld)\n", acc);
    sp_verify_ws_free(ws);
    free(p);
    free(q);
    free(x);
    return 0;
}
