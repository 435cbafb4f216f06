/* Golden logits (llm.c style): Specula's logits against llama.cpp's on the
 * same files and tokens, for every tensor format, read from
 * ../shared/reference/formats (see its README: a random-weight Llama model
 * quantised by llama-quantize into every format and mix, llama.cpp's logits
 * for token sequences A (16 ids) and B (24 ids) evaluated in one batch with
 * an F32 KV cache, and its 32 greedy ids after A).
 *
 * How they were traced: llama.cpp's graph for these files rebuilt on ggml
 * (the ggml commit of the same week, built with the same gcc 12.2 and
 * -march=native on the same kind of AVX-512 EPYC) reproduces every
 * reference logit digit for digit, and dumping its intermediate tensors
 * next to Specula's shows where the bits first part (a throwaway harness
 * outside the repository, nothing of it here).
 *
 * Every file runs twice, in Specula's two arithmetics for quantised
 * matmuls (ops.h): the fast kernels (the default), and ggml order, which
 * sums the same integer block products in the float order of llama.cpp's
 * x86 kernels.
 *
 * Tolerances (stated, per what was traced):
 *  - ggml order, every file: every logit exactly llama.cpp's as printed
 *    (%.6g); on the dumps, every intermediate tensor is bit-identical to
 *    the rebuilt graph's (checked for base-f32 and the Q4_1, Q2_K, Q6_K and
 *    IQ4_XS files; for Q4_0 the rebuilt graph lacked llama.cpp's
 *    repacking, so only the logits were compared). Besides
 *    the matmul order this needs, in both arithmetics, the F32 matmuls in
 *    tinyBLAS's order, RMSNorm's double sum, RoPE as ggml forms it (angles
 *    by repeated products, its FMAs), attention in ggml's order (its dot,
 *    softmax with its vector expf, tinyBLAS's 16-lane kqv), SiLU with its
 *    vector expf, and activations quantised as ggml quantises them
 *    (f16-rounded block scales, round-to-nearest-even, q8_1 sums, q8_K
 *    super-blocks). Reverting any of them breaks this (measured: the RoPE
 *    FMAs 3,650 misprinted logits of base-f32, the SiLU exp 3,186).
 *  - fast kernels, base-f32: the same (no quantised matmul in it).
 *  - fast kernels, quantised files: the integer block sums are the same,
 *    but each output's float sum runs block by block on the whole integer
 *    sum where ggml keeps 8 lanes (4 elements each) and adds them at the
 *    end, so ~70% of the outputs differ in their last bit. Most positions
 *    still agree to ~5e-6; but when such a value sits on a rounding
 *    boundary of the next activation quantiser (an int8 value at k + 0.5,
 *    or the f16 scale amax/127), that rounding flips and every later
 *    position moves by ~0.01-0.07 through the KV cache (a clean step:
 *    exact up to position p, off after). The first flip of each file,
 *    measured (t = position, i = element, values ggml / Specula):
 *      mix/pure-Q4_1 A: ffn_down input of layer 0, t 0, block 1: its scale
 *        amax/127 = 0.0134925852 / 0.0134925796 rounds to another f16
 *        (position 0 feeds every later one, hence the median);
 *        B: attention output of layer 0, t 2, i 217: x * 127/amax =
 *        34.5000114 / 34.4999962 (35 / 34);
 *      mix/pure-Q5_1 A: ffn_down input of layer 1, t 15, block 13 (f16 d
 *        0.0132942274 / 0.0132942181); B: layer 0, t 2, block 19 (f16 d);
 *      mix/pure-Q5_K_M, mix-Q5_K_S B: ffn_down input of layer 0, t 7,
 *        i 629: -73.5000305 / -73.4999924 (q8_K);
 *      mix/pure-Q6_K B: attention output of layer 1, t 12, i 58:
 *        -27.5000057 / -27.4999962 (the block's max differs);
 *      mix/pure-IQ4_XS B: ffn norm of layer 1, t 18, i 7: -45.4999924 /
 *        -45.5 (exactly a tie: rounds to even);
 *      output-norm flips, which move one position only: mix-Q5_0 A (t 4,
 *        i 141, 55.4999962 / 55.5000038: 6.8e-3), mix-Q3_K_M A (t 2, i 67:
 *        4.3e-3), mix/pure-Q6_K A (t 15, i 141: 6.4e-3).
 *    In ggml order none of these flip (above).
 *    Held to: every logit within 0.1; the median position within 1e-4
 *    except for the files listed in RESIDUAL (Q4_1: the flip at position
 *    0 moves every position); and the 32 greedy ids equal to
 *    llama.cpp's, until the first step whose top-2 margin is below 0.1 (a
 *    near tie: either id is right, and the continuations part).
 * The max |diff| per file is printed. */
#include "testutil.h"

#include <math.h>

#include "ops.h"
#include "sp_model.h"

static const int32_t SEQ_A[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
static const int32_t SEQ_B[] = {1,   410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426,
                                385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388};

static const char *RESIDUAL[] = {"mix-Q4_1", "pure-Q4_1"};

static bool is_residual(const char *name) {
    for (size_t i = 0; i < sizeof RESIDUAL / sizeof RESIDUAL[0]; i++)
        if (!strcmp(RESIDUAL[i], name)) return true;
    return false;
}

static const char *FILES[] = {
    "base-f32",      "mix-Q8_0",     "mix-Q4_0",    "mix-Q4_1",    "mix-Q5_0",     "mix-Q5_1",
    "mix-IQ4_NL",    "mix-IQ4_XS",   "mix-Q2_K",    "mix-Q3_K_S",  "mix-Q3_K_M",   "mix-Q4_K_S",
    "mix-Q4_K_M",    "mix-Q5_K_S",   "mix-Q5_K_M",  "mix-Q6_K",    "pure-Q4_1",    "pure-Q5_0",
    "pure-Q5_1",     "pure-IQ4_NL",  "pure-IQ4_XS", "pure-Q2_K",   "pure-Q3_K_M",  "pure-Q4_K_M",
    "pure-Q5_K_M",   "pure-Q6_K",
};

/* Reads n_rows lines of n_vocab floats. */
static float *read_logits(const char *name, const char *which, int n_rows, int n_vocab) {
    char rel[160];
    snprintf(rel, sizeof rel, "reference/formats/%s.logits-%s.txt", name, which);
    FILE *f = fopen(sp_shared(rel), "r");
    if (!f) {
        fprintf(stderr, "missing reference file %s\n", sp_shared(rel));
        return NULL;
    }
    float *v = malloc((size_t)n_rows * (size_t)n_vocab * sizeof(float));
    for (int i = 0; i < n_rows * n_vocab; i++)
        if (fscanf(f, "%f", &v[i]) != 1) {
            fclose(f);
            free(v);
            return NULL;
        }
    fclose(f);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* Runs one sequence in one batch; returns max |diff| and fills per-position
 * maxima; *misprinted counts the logits whose %.6g rendering is not the
 * reference's value. */
static double compare_seq(const sp_model *m, const char *name, const char *which, const int32_t *seq,
                          int n, double *pos_max, int *misprinted) {
    const int V = sp_model_cfg(m)->n_vocab;
    float *want = read_logits(name, which, n, V);
    assert_non_null(want);
    sp_ctx *c = NULL;
    sp_error err = {0};
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = 128;
    p.type_k = p.type_v = SP_GGML_F32; /* the references' cache */
    assert_int_equal(sp_ctx_init(m, &p, &c, &err), SP_OK);
    float *got = malloc((size_t)n * (size_t)V * sizeof(float));
    sp_batch b = {.tokens = seq, .n = n, .logits_all = true};
    assert_int_equal(sp_forward(c, &b, got, &err), SP_OK);
    double mx = 0;
    for (int t = 0; t < n; t++) {
        pos_max[t] = 0;
        for (int i = 0; i < V; i++) {
            double d = fabs((double)got[t * V + i] - want[t * V + i]);
            char txt[32];
            snprintf(txt, sizeof txt, "%.6g", (double)got[t * V + i]);
            *misprinted += strtof(txt, NULL) != want[t * V + i];
            if (d > pos_max[t]) pos_max[t] = d;
        }
        if (pos_max[t] > mx) mx = pos_max[t];
    }
    sp_ctx_free(c);
    free(got);
    free(want);
    return mx;
}

/* Greedy continuation after A, one token per forward; compared with
 * llama.cpp's ids until the first step where llama.cpp's top-2 margin (read
 * from our logits of the shared prefix, which agree with its logits to the
 * tolerance above) is below 0.1. Returns the number of ids compared. */
static int compare_greedy(const sp_model *m, const char *name, bool *ok) {
    char rel[160];
    snprintf(rel, sizeof rel, "reference/formats/%s.greedy-a.txt", name);
    FILE *f = fopen(sp_shared(rel), "r");
    assert_non_null(f);
    int32_t want[32];
    for (int i = 0; i < 32; i++) assert_int_equal(fscanf(f, "%d", &want[i]), 1);
    fclose(f);
    const int V = sp_model_cfg(m)->n_vocab;
    sp_ctx *c = NULL;
    sp_error err = {0};
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = 128;
    p.type_k = p.type_v = SP_GGML_F32;
    assert_int_equal(sp_ctx_init(m, &p, &c, &err), SP_OK);
    float *lg = malloc((size_t)V * sizeof(float));
    sp_batch b = {.tokens = SEQ_A, .n = 16};
    assert_int_equal(sp_forward(c, &b, lg, &err), SP_OK);
    int compared = 0;
    *ok = true;
    for (int i = 0; i < 32; i++) {
        int top = argmax(lg, V);
        float second = -INFINITY;
        for (int j = 0; j < V; j++)
            if (j != top && lg[j] > second) second = lg[j];
        if (lg[top] - second < 0.1f) break; /* a near tie: either id is right */
        compared++;
        if (top != want[i]) {
            fprintf(stderr, "%s: greedy step %d: got %d, llama.cpp %d (margin %.3g)\n", name, i, top,
                    want[i], (double)(lg[top] - second));
            *ok = false;
            break;
        }
        int32_t tok = top;
        sp_batch one = {.tokens = &tok, .n = 1};
        assert_int_equal(sp_forward(c, &one, lg, &err), SP_OK);
    }
    sp_ctx_free(c);
    free(lg);
    return compared;
}

/* One file in one arithmetic (ggml order on or off, see the top); prints
 * its line and returns whether it is within its tolerance. */
static bool check_file(const char *name, bool ggml) {
    sp_ops_set_ggml_order(ggml); /* before loading: it decides the packing */
    char rel[160];
    snprintf(rel, sizeof rel, "reference/formats/%s.gguf", name);
    sp_model *m = NULL;
    sp_error err = {0};
    sp_model_params mp = sp_model_default_params();
    if (sp_model_load(sp_shared(rel), &mp, &m, &err) != SP_OK) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        fail();
    }
    double pos[40];
    int misprinted = 0;
    double ma = compare_seq(m, name, "a", SEQ_A, 16, pos, &misprinted);
    double mb = compare_seq(m, name, "b", SEQ_B, 24, pos + 16, &misprinted);
    qsort(pos, 40, sizeof pos[0], cmp_double);
    const double median = pos[20], mx = ma > mb ? ma : mb;
    bool greedy_ok;
    int compared = compare_greedy(m, name, &greedy_ok);
    const bool exact = ggml || !strcmp(name, "base-f32");
    const bool ok = exact ? misprinted == 0 : (mx < 0.1 && (median <= 1e-4 || is_residual(name)));
    printf("golden %-5s %-12s max|diff| A %.2e B %.2e  median position %.2e  printed differently %5d  "
           "greedy %d/32 %s%s%s\n",
           ggml ? "ggml" : "fast", name, ma, mb, median, misprinted, compared, greedy_ok ? "equal" : "DIFFERENT",
           !exact && is_residual(name) ? "  (known residual)" : "", ok ? "" : "  OUT OF TOLERANCE");
    sp_model_free(m);
    sp_ops_set_ggml_order(false);
    return ok && greedy_ok;
}

static void test_golden_logits(void **state) {
    (void)state;
    bool all_ok = true;
    for (int ggml = 0; ggml < 2; ggml++)
        for (size_t fi = 0; fi < sizeof FILES / sizeof FILES[0]; fi++) all_ok &= check_file(FILES[fi], ggml);
    assert_true(all_ok);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_golden_logits),
};

SP_TEST_MAIN(tests)
