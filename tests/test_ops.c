/* Tests for the compute kernels: every SIMD matmul against the scalar
 * reference (stated tolerance), and the invariances the forward pass relies
 * on: results independent of batch size and of how rows are split. */
#include "testutil.h"

#include <math.h>

#include "kv.h"
#include "ops.h"
#include "quant.h"
#include "rng.h"

static const sp_ggml_type TYPES[] = {SP_GGML_F32, SP_GGML_F16, SP_GGML_BF16, SP_GGML_Q8_0,
                                     SP_GGML_Q4_0};

typedef struct fixture {
    sp_ggml_type type;
    int64_t rows, k;
    int32_t n;
    uint8_t *w;
    size_t w_stride;
    float *x;      /* [n][k] */
    uint8_t *act;  /* prepared */
    size_t act_stride;
    double *bound; /* [n][rows] sum |w||x| for the tolerance */
} fixture;

/* A valid row of a type Specula only reads (Q2_K, Q3_K): random bytes with
 * small finite f16 scales (random bytes there could be inf or NaN). */
static void random_row(sp_ggml_type type, uint8_t *row, int64_t k, sp_rng *r) {
    const size_t bytes = sp_ggml_row_size(type, k);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)sp_rng_below(r, 256);
    for (int64_t b = 0; b < k / SP_QK_K; b++) {
        const uint16_t d = sp_fp32_to_fp16((float)(0.002 + 0.01 * sp_rng_uniform(r)));
        if (type == SP_GGML_Q2_K) {
            ((sp_block_q2_K *)row)[b].d = d;
            ((sp_block_q2_K *)row)[b].dmin = sp_fp32_to_fp16((float)(0.002 + 0.01 * sp_rng_uniform(r)));
        } else {
            assert_int_equal(type, SP_GGML_Q3_K);
            ((sp_block_q3_K *)row)[b].d = d;
        }
    }
}

static void fx_make(fixture *f, sp_ggml_type type, int64_t rows, int64_t k, int32_t n, uint64_t seed) {
    sp_rng r;
    sp_rng_seed(&r, seed);
    f->type = type;
    f->rows = rows;
    f->k = k;
    f->n = n;
    f->w_stride = sp_ggml_row_size(type, k);
    f->w = malloc(f->w_stride * (size_t)rows);
    float *row = malloc((size_t)k * sizeof(float));
    float *deq = malloc((size_t)k * sizeof(float));
    f->x = malloc((size_t)(n * k) * sizeof(float));
    f->bound = calloc((size_t)(n * rows), sizeof(double));
    for (int64_t i = 0; i < n * k; i++) f->x[i] = (float)sp_rng_normal(&r);
    for (int64_t j = 0; j < rows; j++) {
        for (int64_t i = 0; i < k; i++) row[i] = (float)sp_rng_normal(&r) * 0.1f;
        if (sp_quant_supported(type))
            sp_quantize_row(type, row, f->w + j * f->w_stride, k);
        else
            random_row(type, f->w + j * f->w_stride, k, &r);
        sp_dequantize_row(type, f->w + j * f->w_stride, deq, k);
        for (int32_t t = 0; t < n; t++)
            for (int64_t i = 0; i < k; i++) f->bound[t * rows + j] += fabs(deq[i] * f->x[t * k + i]);
    }
    f->act_stride = sp_ops_act_bytes(type, k);
    f->act = aligned_alloc(64, f->act_stride * (size_t)n);
    for (int32_t t = 0; t < n; t++)
        sp_ops_act_prepare(type, f->x + t * k, k, f->act + t * f->act_stride);
    free(row);
    free(deq);
}

static void fx_free(fixture *f) {
    free(f->w);
    free(f->x);
    free(f->act);
    free(f->bound);
}

static sp_mm fx_mm(const fixture *f, int32_t t0, int32_t n, float *y) {
    return (sp_mm){.wtype = f->type, .w = f->w, .w_stride = f->w_stride, .k = f->k,
                   .x = f->act + t0 * f->act_stride, .x_stride = f->act_stride, .n = n,
                   .y = y, .ld_y = f->rows};
}

static bool row_len_ok(sp_ggml_type t, int64_t k) { return k % sp_ggml_blck_size(t) == 0; }

/* SIMD vs scalar: |y_simd - y_ref| <= 1e-5 * sum|w x| + 1e-6 (float
 * accumulation in a different order; the integer block sums are exact). */
static void test_simd_matches_reference(void **state) {
    (void)state;
    const int64_t ks[] = {17, 32, 64, 96, 172, 256, 544, 608, 4096};
    for (int isa = SP_ISA_SCALAR + 1; isa <= (int)sp_ops_best_isa(); isa++) {
        for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                sp_ggml_type type = TYPES[ti];
                if (!row_len_ok(type, ks[ki])) continue;
                fixture f;
                fx_make(&f, type, 19, ks[ki], 11, 100 + ti * 10 + ki);
                float *yr = malloc((size_t)(f.n * f.rows) * sizeof(float));
                float *ys = malloc((size_t)(f.n * f.rows) * sizeof(float));
                sp_mm m = fx_mm(&f, 0, f.n, yr);
                sp_ops_mm_isa(type, SP_ISA_SCALAR)(&m, 0, f.rows);
                m.y = ys;
                sp_ops_mm_isa(type, (sp_isa)isa)(&m, 0, f.rows);
                for (int64_t i = 0; i < f.n * f.rows; i++) {
                    double tol = 1e-5 * f.bound[i] + 1e-6;
                    if (fabs((double)ys[i] - yr[i]) > tol)
                        fail_msg("%s %s k=%lld: y[%lld] = %.9g, reference %.9g (tol %.3g)",
                                 sp_ops_isa_name((sp_isa)isa), sp_ggml_type_name(type),
                                 (long long)f.k, (long long)i, ys[i], yr[i], tol);
                }
                free(yr);
                free(ys);
                fx_free(&f);
            }
        }
    }
}

/* F32/F16/BF16: every ISA's kernel gives the scalar reference's bits (16
 * FMA lanes over the elements l mod 16, then sp_reduce16: tinyBLAS's order,
 * which llama.cpp's F32 matmuls use, so SPECULA_ISA=scalar also gives its
 * logits on F32 files, see test_golden); and the scalar F32 reference is
 * that formula, recomputed here. k with partial last vectors and half
 * vectors (the AVX2 kernel's 8-lane halves). */
static void test_float_isa_bit_identical(void **state) {
    (void)state;
    const sp_ggml_type types[] = {SP_GGML_F32, SP_GGML_F16, SP_GGML_BF16};
    const int64_t ks[] = {1, 7, 8, 9, 16, 17, 24, 40, 1624};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            fixture f;
            fx_make(&f, types[ti], 19, ks[ki], 5, 9000 + 10 * ti + ki);
            const size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
            float *yr = malloc(bytes), *ys = malloc(bytes);
            sp_mm m = fx_mm(&f, 0, f.n, yr);
            sp_ops_mm_isa(f.type, SP_ISA_SCALAR)(&m, 0, f.rows);
            if (f.type == SP_GGML_F32)
                for (int64_t r = 0; r < f.rows; r++)
                    for (int32_t t = 0; t < f.n; t++) {
                        const float *w = (const float *)(f.w + r * f.w_stride), *x = f.x + t * f.k;
                        float a[16] = {0};
                        for (int64_t i = 0; i < f.k; i++) a[i % 16] = fmaf(w[i], x[i], a[i % 16]);
                        const float want = sp_reduce16(a), got = yr[t * f.rows + r];
                        if (memcmp(&want, &got, sizeof got))
                            fail_msg("scalar F32 k=%lld row %lld token %d: %.9g, 16-lane FMA sum %.9g",
                                     (long long)f.k, (long long)r, t, got, want);
                    }
            for (int isa = SP_ISA_SCALAR + 1; isa <= (int)sp_ops_best_isa(); isa++) {
                memset(ys, 0xFF, bytes);
                m.y = ys;
                sp_ops_mm_isa(f.type, (sp_isa)isa)(&m, 0, f.rows);
                for (int64_t i = 0; i < f.n * f.rows; i++)
                    if (memcmp(&ys[i], &yr[i], sizeof ys[i]))
                        fail_msg("%s %s k=%lld: y[%lld] = %.9g, scalar %.9g", sp_ops_isa_name((sp_isa)isa),
                                 sp_ggml_type_name(f.type), (long long)f.k, (long long)i, ys[i], yr[i]);
            }
            free(yr);
            free(ys);
            fx_free(&f);
        }
}

/* The expert matmul's F16 kernel (ggml's vec_dot_f16 order, ops.h:
 * sp_ops_mm_f16_vecdot): every tier bit for bit equal to the scalar twin,
 * over row lengths with and without a 64-element tail; the scalar twin
 * within 1e-5 of sum |w x| of the double-precision product. */
static void test_f16_vecdot_isa_bit_identical(void **state) {
    (void)state;
    const int64_t ks[] = {1, 17, 64, 100, 768, 2880};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        fixture f;
        fx_make(&f, SP_GGML_F16, 21, ks[ki], 3, 9100 + ki);
        for (int64_t i = 0; i < f.n * f.k; i++) f.x[i] = sp_fp16_to_fp32(sp_fp32_to_fp16(f.x[i]));
        const size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
        float *yr = malloc(bytes), *ys = malloc(bytes);
        sp_mm m = {.wtype = SP_GGML_F16, .w = f.w, .w_stride = f.w_stride, .k = f.k, .x = f.x,
                   .x_stride = (size_t)f.k * sizeof(float), .n = f.n, .y = yr, .ld_y = f.rows};
        sp_ops_mm_f16_vecdot_isa(SP_ISA_SCALAR)(&m, 0, f.rows);
        for (int64_t r = 0; r < f.rows; r++)
            for (int32_t t = 0; t < f.n; t++) {
                const uint16_t *w = (const uint16_t *)(f.w + r * f.w_stride);
                double d = 0, b = 0;
                for (int64_t i = 0; i < f.k; i++) {
                    d += (double)sp_fp16_to_fp32(w[i]) * f.x[t * f.k + i];
                    b += fabs((double)sp_fp16_to_fp32(w[i]) * f.x[t * f.k + i]);
                }
                assert_true(fabs(yr[t * f.rows + r] - d) <= 1e-5 * b + 1e-6);
            }
        for (int isa = SP_ISA_SCALAR + 1; isa <= (int)sp_ops_best_isa(); isa++) {
            memset(ys, 0xFF, bytes);
            m.y = ys;
            sp_ops_mm_f16_vecdot_isa((sp_isa)isa)(&m, 0, f.rows);
            for (int64_t i = 0; i < f.n * f.rows; i++)
                if (memcmp(&ys[i], &yr[i], sizeof ys[i]))
                    fail_msg("%s f16 vecdot k=%lld: y[%lld] = %.9g, scalar %.9g", sp_ops_isa_name((sp_isa)isa),
                             (long long)f.k, (long long)i, ys[i], yr[i]);
        }
        free(yr);
        free(ys);
        fx_free(&f);
    }
}

/* The reference itself against a double-precision product of the
 * dequantised weights (quantised activations add their own error for q8). */
static void test_reference_accuracy(void **state) {
    (void)state;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        fixture f;
        fx_make(&f, TYPES[ti], 7, 256, 3, 7 + ti);
        float *y = malloc((size_t)(f.n * f.rows) * sizeof(float));
        float *deq = malloc((size_t)f.k * sizeof(float));
        sp_mm m = fx_mm(&f, 0, f.n, y);
        sp_ops_mm_isa(f.type, SP_ISA_SCALAR)(&m, 0, f.rows);
        /* q8 activations: |x - xq| <= d/2 with d = amax/127 per block */
        double rel = sp_ops_act_is_q8(f.type) ? 0.02 : 1e-5;
        for (int64_t j = 0; j < f.rows; j++) {
            sp_dequantize_row(f.type, f.w + j * f.w_stride, deq, f.k);
            for (int32_t t = 0; t < f.n; t++) {
                double acc = 0;
                for (int64_t i = 0; i < f.k; i++) acc += (double)deq[i] * f.x[t * f.k + i];
                double b = f.bound[t * f.rows + j];
                assert_true(fabs(acc - y[t * f.rows + j]) <= rel * b + 1e-6);
            }
        }
        free(y);
        free(deq);
        fx_free(&f);
    }
}

/* n activations in one call == one call per activation, bit for bit, and
 * splitting rows in two calls changes nothing; for every ISA and type. */
static void test_batch_and_split_invariance(void **state) {
    (void)state;
    for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
        for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
            fixture f;
            fx_make(&f, TYPES[ti], 23, 160, 13, 55 + ti);
            size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
            float *ya = malloc(bytes), *yb = malloc(bytes), *yc = malloc(bytes);
            sp_mm_kernel k = sp_ops_mm_isa(f.type, (sp_isa)isa);
            sp_mm m = fx_mm(&f, 0, f.n, ya);
            k(&m, 0, f.rows);
            for (int32_t t = 0; t < f.n; t++) {
                sp_mm one = fx_mm(&f, t, 1, yb + t * f.rows);
                k(&one, 0, f.rows);
            }
            m.y = yc;
            k(&m, 0, 9);
            k(&m, 9, f.rows);
            assert_memory_equal(ya, yb, bytes);
            assert_memory_equal(ya, yc, bytes);
            free(ya);
            free(yb);
            free(yc);
            fx_free(&f);
        }
    }
}

/* The same invariances for shapes that reach the AVX-512 float kernels'
 * k-blocked panels: rows beyond one panel (odd count, splits inside a
 * panel), rows long enough to be cut into chunks (k = 1624 also ends in a
 * partial vector), n = 27 = a block of 16, one of 8 and 3 more tokens; and
 * every ISA against the scalar reference there. */
static void test_batch_split_invariance_long_rows(void **state) {
    (void)state;
    for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
        for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
            int64_t k = row_len_ok(TYPES[ti], 1624) ? 1624 : 1600;
            fixture f;
            fx_make(&f, TYPES[ti], 37, k, 27, 900 + ti);
            size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
            float *ya = malloc(bytes), *yb = malloc(bytes), *yc = malloc(bytes), *yr = malloc(bytes);
            sp_mm_kernel kern = sp_ops_mm_isa(f.type, (sp_isa)isa);
            sp_mm m = fx_mm(&f, 0, f.n, ya);
            kern(&m, 0, f.rows);
            for (int32_t t = 0; t < f.n; t++) {
                sp_mm one = fx_mm(&f, t, 1, yb + t * f.rows);
                kern(&one, 0, f.rows);
            }
            m.y = yc;
            kern(&m, 0, 9);
            kern(&m, 9, 30);
            kern(&m, 30, f.rows);
            assert_memory_equal(ya, yb, bytes);
            assert_memory_equal(ya, yc, bytes);
            m.y = yr;
            sp_ops_mm_isa(f.type, SP_ISA_SCALAR)(&m, 0, f.rows);
            for (int64_t i = 0; i < f.n * f.rows; i++)
                if (fabs((double)ya[i] - yr[i]) > 1e-5 * f.bound[i] + 1e-6)
                    fail_msg("%s %s: y[%lld] = %.9g, reference %.9g", sp_ops_isa_name((sp_isa)isa),
                             sp_ggml_type_name(f.type), (long long)i, ya[i], yr[i]);
            free(ya);
            free(yb);
            free(yc);
            free(yr);
            fx_free(&f);
        }
    }
}

/* Packed weights (ops.h): every ISA's kernel over the packed layout gives
 * the scalar reference's bits on the original rows, for every packable
 * type, row counts that leave a partial group of 16 (and a single row), row
 * ranges cut inside groups, odd and even block counts (k = 32 .. 1312;
 * K-quants 256 and 768), and 1..16 and 19 tokens (every tile width of 16,
 * 8, 4, 2, 1 and their sums), at once and one token at a time. The scalar
 * tier has a packed twin for every packable type, the AVX-512 tier a packed
 * kernel for each (checked where the CPU has it). */
static const sp_ggml_type PACKED_TYPES[] = {SP_GGML_Q8_0, SP_GGML_Q4_0, SP_GGML_Q4_1,  SP_GGML_Q5_0,
                                            SP_GGML_Q5_1, SP_GGML_IQ4_NL, SP_GGML_Q4_K, SP_GGML_Q5_K,
                                            SP_GGML_Q6_K, SP_GGML_IQ4_XS, SP_GGML_Q2_K, SP_GGML_Q3_K,
                                            SP_GGML_MXFP4};
#define N_PACKED (sizeof PACKED_TYPES / sizeof PACKED_TYPES[0])

static void test_packed_bit_identical(void **state) {
    (void)state;
    const int64_t ks[] = {32, 96, 256, 1312, 768};
    const int64_t rowss[] = {1, 19, 37};
    int checked = 0, expected = 0;
    for (size_t ti = 0; ti < N_PACKED; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (size_t ri = 0; ri < sizeof rowss / sizeof rowss[0]; ri++) {
                const sp_ggml_type type = PACKED_TYPES[ti];
                if (!row_len_ok(type, ks[ki])) continue;
                assert_true(sp_ops_packable(type));
                fixture f;
                fx_make(&f, type, rowss[ri], ks[ki], 19, 4000 + 100 * ti + 10 * ki + ri);
                const size_t pb = sp_ops_pack_bytes(type, f.rows, f.k);
                assert_int_equal(pb % 64, 0);
                assert_true(pb >= f.w_stride * (size_t)f.rows);
                uint8_t *pk = aligned_alloc(64, pb);
                sp_ops_pack(type, f.w, f.w_stride, f.rows, f.k, pk);
                const size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
                float *yr = malloc(bytes), *ya = malloc(bytes), *yb = malloc(bytes);
                sp_mm m = fx_mm(&f, 0, f.n, yr);
                sp_ops_mm_isa(type, SP_ISA_SCALAR)(&m, 0, f.rows);
                expected += 17 * (sp_ops_best_isa() >= SP_ISA_AVX512 ? 2 : 1);
                for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
                    sp_mm_kernel kern = sp_ops_mm_packed_isa(type, (sp_isa)isa);
                    if (!kern) continue;
                    for (int32_t n = 1; n <= f.n; n += n < 16 ? 1 : 3) { /* 1..16, 19 */
                        memset(ya, 0xFF, bytes);
                        sp_mm p = fx_mm(&f, 0, n, ya);
                        p.w = pk;
                        p.w_stride = sp_ops_pack_stride(type, f.k);
                        /* rows in pieces that start and end inside groups */
                        for (int64_t r = 0; r < f.rows; r += 7) kern(&p, r, r + 7 < f.rows ? r + 7 : f.rows);
                        for (int64_t i = 0; i < n * f.rows; i++)
                            if (memcmp(&ya[i], &yr[i], sizeof(float)))
                                fail_msg("%s packed %s k=%lld rows=%lld n=%d: y[%lld] = %.9g, reference %.9g",
                                         sp_ops_isa_name((sp_isa)isa), sp_ggml_type_name(type), (long long)f.k,
                                         (long long)f.rows, n, (long long)i, ya[i], yr[i]);
                        checked++;
                    }
                    for (int32_t t = 0; t < f.n; t++) { /* one token at a time, all rows */
                        sp_mm one = fx_mm(&f, t, 1, yb + t * f.rows);
                        one.w = pk;
                        one.w_stride = sp_ops_pack_stride(type, f.k);
                        kern(&one, 0, f.rows);
                    }
                    assert_memory_equal(yb, yr, bytes);
                }
                free(pk);
                free(yr);
                free(ya);
                free(yb);
                fx_free(&f);
            }
    /* the scalar twin always, the AVX-512 kernel where the CPU has it */
    assert_int_equal(checked, expected);
}

/* Large batches (prefill): the packed kernels block the tokens and the
 * row groups for the caches (PK_FOR_TILES in ops_avx512.c) once the
 * activation rows of a batch outgrow its budget; wide rows (k = 8192, a
 * block of 16 tokens) and 5 groups of rows make several token blocks and
 * row panels, cut in row ranges of whole and partial groups: still the
 * scalar reference's bits. */
static void test_packed_blocked_bit_identical(void **state) {
    (void)state;
    const sp_ggml_type types[] = {SP_GGML_Q8_0, SP_GGML_Q4_K, SP_GGML_Q6_K};
    const int64_t k = 8192, rows = 70;
    const int32_t n = 37;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const sp_ggml_type type = types[ti];
        fixture f;
        fx_make(&f, type, rows, k, n, 5100 + ti);
        uint8_t *pk = aligned_alloc(64, sp_ops_pack_bytes(type, rows, k));
        sp_ops_pack(type, f.w, f.w_stride, rows, k, pk);
        const size_t bytes = (size_t)(n * rows) * sizeof(float);
        float *yr = malloc(bytes), *ya = malloc(bytes);
        sp_mm m = fx_mm(&f, 0, n, yr);
        sp_ops_mm_isa(type, SP_ISA_SCALAR)(&m, 0, rows);
        for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
            sp_mm_kernel kern = sp_ops_mm_packed_isa(type, (sp_isa)isa);
            if (!kern) continue;
            const int64_t cuts[] = {rows, 23};
            for (int c = 0; c < 2; c++) {
                memset(ya, 0xFF, bytes);
                sp_mm p = fx_mm(&f, 0, n, ya);
                p.w = pk;
                p.w_stride = sp_ops_pack_stride(type, k);
                for (int64_t r = 0; r < rows; r += cuts[c]) kern(&p, r, r + cuts[c] < rows ? r + cuts[c] : rows);
                assert_memory_equal(ya, yr, bytes);
            }
        }
        free(pk);
        free(yr);
        free(ya);
        fx_free(&f);
    }
}

/* Packed F32/F16/BF16 (ops.h): each ISA's packed kernel gives the bits of
 * that ISA's ordinary kernel on the original rows (the scalar twin: the
 * scalar reference's), for rows leaving a partial group, row ranges cut
 * inside groups, k with a partial last vector (40, 1624) and k cut into
 * panel chunks (1624), n = 1..16, 19 and 27 (a panel block of 16, one of 8
 * and 3 more), at once and one token at a time. The scalar tier has the
 * twin, the AVX-512 tier a packed kernel (where the CPU has it); the AVX2
 * tier none (it reads the original rows). */
static void test_packed_float_bit_identical(void **state) {
    (void)state;
    const sp_ggml_type types[] = {SP_GGML_F32, SP_GGML_F16, SP_GGML_BF16};
    const int64_t ks[] = {16, 40, 160, 1624};
    const int64_t rowss[] = {1, 19, 37};
    int checked = 0;
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (size_t ri = 0; ri < sizeof rowss / sizeof rowss[0]; ri++) {
                const sp_ggml_type type = types[ti];
                assert_true(sp_ops_packable(type));
                fixture f;
                fx_make(&f, type, rowss[ri], ks[ki], 27, 7000 + 100 * ti + 10 * ki + ri);
                const size_t pb = sp_ops_pack_bytes(type, f.rows, f.k), ps = sp_ops_pack_stride(type, f.k);
                assert_int_equal(pb % 64, 0);
                assert_true(pb >= f.w_stride * (size_t)f.rows);
                uint8_t *pk = aligned_alloc(64, pb);
                sp_ops_pack(type, f.w, f.w_stride, f.rows, f.k, pk);
                const size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
                float *yr = malloc(bytes), *ya = malloc(bytes), *yb = malloc(bytes);
                for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
                    sp_mm_kernel kern = sp_ops_mm_packed_isa(type, (sp_isa)isa);
                    assert_true((kern != NULL) == (isa != SP_ISA_AVX2));
                    if (!kern) continue;
                    sp_mm m = fx_mm(&f, 0, f.n, yr);
                    sp_ops_mm_isa(type, (sp_isa)isa)(&m, 0, f.rows);
                    for (int32_t n = 1; n <= f.n; n += n < 16 ? 1 : n < 19 ? 3 : 8) { /* 1..16, 19, 27 */
                        memset(ya, 0xFF, bytes);
                        sp_mm p = fx_mm(&f, 0, n, ya);
                        p.w = pk;
                        p.w_stride = ps;
                        for (int64_t r = 0; r < f.rows; r += 7) kern(&p, r, r + 7 < f.rows ? r + 7 : f.rows);
                        sp_mm q = fx_mm(&f, 0, n, yb);
                        sp_ops_mm_isa(type, (sp_isa)isa)(&q, 0, f.rows);
                        for (int64_t i = 0; i < n * f.rows; i++)
                            if (memcmp(&ya[i], &yb[i], sizeof(float)))
                                fail_msg("%s packed %s k=%lld rows=%lld n=%d: y[%lld] = %.9g, unpacked %.9g",
                                         sp_ops_isa_name((sp_isa)isa), sp_ggml_type_name(type), (long long)f.k,
                                         (long long)f.rows, n, (long long)i, ya[i], yb[i]);
                        checked++;
                    }
                    memset(yb, 0xFF, bytes);
                    for (int32_t t = 0; t < f.n; t++) { /* one token at a time, all rows */
                        sp_mm one = fx_mm(&f, t, 1, yb + t * f.rows);
                        one.w = pk;
                        one.w_stride = ps;
                        kern(&one, 0, f.rows);
                    }
                    assert_memory_equal(yb, yr, bytes);
                    memset(ya, 0xFF, bytes);
                    sp_mm all = fx_mm(&f, 0, f.n, ya); /* all tokens, all rows in one call */
                    all.w = pk;
                    all.w_stride = ps;
                    kern(&all, 0, f.rows);
                    assert_memory_equal(ya, yr, bytes);
                }
                free(pk);
                free(yr);
                free(ya);
                free(yb);
                fx_free(&f);
            }
    assert_int_equal(checked, 3 * 4 * 3 * 18 * (sp_ops_best_isa() >= SP_ISA_AVX512 ? 2 : 1));
}

static void test_act_prepare(void **state) {
    (void)state;
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = i < 32 ? (float)(i - 16) : 0.0f;
    uint8_t buf[512] __attribute__((aligned(64)));
    assert_true(sp_ops_act_bytes(SP_GGML_Q8_0, 64) <= sizeof buf);
    sp_ops_act_prepare(SP_GGML_Q8_0, x, 64, buf);
    const int8_t *qs = sp_act_qs(buf);
    const float *d = sp_act_d(buf, 64);
    const int32_t *s = sp_act_sum(buf, 64);
    /* d is kept as ggml keeps it: rounded to f16 */
    assert_true(d[0] == sp_fp16_to_fp32(sp_fp32_to_fp16(16.0f / 127.0f)));
    assert_true(d[0] != 16.0f / 127.0f);
    assert_int_equal(qs[0], -127); /* x = -16 = -amax */
    assert_int_equal(qs[16], 0);
    assert_int_equal(d[1], 0);
    int32_t sum = 0;
    for (int i = 0; i < 32; i++) sum += qs[i];
    assert_int_equal(s[0], sum);
    assert_int_equal(s[1], 0);
}

/* The group-of-4 extension of Q8_0/Q4_0 rows (ops.h): shuffled halves,
 * per-lane scales and corrections, zero past the last block. k = 160 is
 * one full group and one group with a single block. */
static void test_act_prepare_g4(void **state) {
    (void)state;
    enum { K = 160, NB = K / 32 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = (float)((i * 37) % 23) - 11.0f + 0.25f * (float)(i / 32);
    const sp_ggml_type types[] = {SP_GGML_Q8_0, SP_GGML_Q4_0};
    for (int ti = 0; ti < 2; ti++) {
        size_t bytes = sp_ops_act_bytes(types[ti], K);
        uint8_t *buf = aligned_alloc(64, bytes);
        assert_true(sp_act_g4_off(K) + sp_act_g4_bytes(K) <= (int64_t)bytes);
        sp_ops_act_prepare(types[ti], x, K, buf);
        const int8_t *qs = sp_act_qs(buf), *gq = sp_act_g4_qs(buf, K);
        const float *d = sp_act_d(buf, K), *gd = sp_act_g4_d(buf, K);
        const int32_t *s = sp_act_sum(buf, K), *gc = sp_act_g4_corr(buf, K);
        const int32_t mult = types[ti] == SP_GGML_Q4_0 ? -2 : -32;
        for (int g = 0; g < 2; g++)
            for (int c = 0; c < 4; c++) {
                int b = 4 * g + c;
                for (int i = 0; i < 16; i++) {
                    assert_int_equal(gq[g * 128 + 16 * c + i], b < NB ? qs[b * 32 + i] : 0);
                    assert_int_equal(gq[g * 128 + 64 + 16 * c + i], b < NB ? qs[b * 32 + 16 + i] : 0);
                }
                for (int i = 0; i < 4; i++) {
                    assert_true(gd[g * 16 + 4 * c + i] == (b < NB ? d[b] : 0.0f));
                    assert_int_equal(gc[g * 16 + 4 * c + i], b < NB ? mult * s[b] : 0);
                }
            }
        free(buf);
    }
}

/* Every ISA's q8 activation quantiser is bit-identical to the scalar one,
 * including exact .5 ties (rounded to even, as ggml's x86 quantiser does),
 * zero blocks and negative zeros. */
static void test_act_prepare_isa_identical(void **state) {
    (void)state;
    const int64_t k = 4096;
    float *x = malloc((size_t)k * sizeof(float));
    sp_rng r;
    sp_rng_seed(&r, 77);
    for (int64_t i = 0; i < k; i++) x[i] = (float)sp_rng_normal(&r) * (i % 7 == 0 ? 100.0f : 1.0f);
    /* block 0: amax 127 so id = 1 and x = n + 0.5 are exact ties */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f;
    x[31] = 127.0f;
    for (int i = 32; i < 64; i++) x[i] = i % 2 ? -0.0f : 0.0f; /* block 1: all zero */
    size_t bytes = sp_ops_act_bytes(SP_GGML_Q8_0, k);
    uint8_t *ref = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
    memset(ref, 0, bytes);
    sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
    sp_ops_act_prepare(SP_GGML_Q8_0, x, k, ref);
    assert_int_equal(sp_act_qs(ref)[0], -16); /* -15.5 -> -16 */
    assert_int_equal(sp_act_qs(ref)[1], -14); /* -14.5 -> -14 */
    assert_int_equal(sp_act_qs(ref)[16], 0);  /* 0.5 -> 0 */
    assert_int_equal(sp_act_qs(ref)[17], 2);  /* 1.5 -> 2 */
    for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
        memset(got, 0, bytes);
        assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
        sp_ops_act_prepare(SP_GGML_Q8_0, x, k, got);
        assert_memory_equal(ref, got, bytes);
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(x);
    free(ref);
    free(got);
}

/* The q8_K activation rows (with each K-quant's extension) are the same
 * bytes in every ISA: ordinary blocks, an all-zero block, a tiny block
 * (the 2^64 scale-up), a block whose largest |x| occurs as -a before +a
 * (the first one gives the sign), exact .5 ties, and blocks with an inf and
 * a NaN (zeros, d = NaN). */
static void test_act_prepare_q8k_isa_identical(void **state) {
    (void)state;
    const int64_t k = 8 * 256;
    float *x = malloc((size_t)k * sizeof(float));
    sp_rng r;
    sp_rng_seed(&r, 78);
    for (int64_t i = 0; i < k; i++) x[i] = (float)sp_rng_normal(&r) * (i % 5 == 0 ? 30.0f : 1.0f);
    for (int i = 256; i < 512; i++) x[i] = i % 2 ? -0.0f : 0.0f;             /* block 1: zero */
    for (int i = 512; i < 768; i++) x[i] = (float)sp_rng_normal(&r) * 0x1p-70f; /* block 2: tiny */
    for (int i = 768; i < 1024; i++) x[i] = (float)sp_rng_normal(&r);          /* block 3: -a first */
    x[800] = -9.0f, x[900] = 9.0f;
    for (int i = 1024; i < 1280; i++) x[i] = (float)(i % 64 - 32) + 0.5f;     /* block 4: ties */
    x[1279] = -127.0f;
    x[1300] = INFINITY;                                                       /* block 5: inf */
    x[1600] = NAN;                                                            /* block 6: NaN */
    const sp_ggml_type types[] = {SP_GGML_Q4_K, SP_GGML_Q6_K, SP_GGML_Q2_K, SP_GGML_Q3_K, SP_GGML_Q5_K};
    sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const size_t bytes = sp_ops_act_bytes(types[ti], k);
        uint8_t *ref = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
        memset(ref, 0, bytes);
        assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
        sp_ops_act_prepare(types[ti], x, k, ref);
        assert_int_equal(sp_act_qs(ref)[800], -127); /* -9 is the max (it maps to -127), */
        assert_int_equal(sp_act_qs(ref)[900], 127);  /* not +9 */
        assert_true(isnan(sp_actk_d(ref, k)[5]) && isnan(sp_actk_d(ref, k)[6]));
        for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
            memset(got, 0, bytes);
            assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
            sp_ops_act_prepare(types[ti], x, k, got);
            assert_memory_equal(ref, got, bytes);
        }
        free(ref);
        free(got);
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(x);
}

static void test_row_kernels(void **state) {
    (void)state;
    float x[8] = {1, -2, 3, -4, 5, -6, 7, -8}, w[8] = {1, 1, 1, 1, 2, 2, 2, 2}, o[8];
    sp_rmsnorm(o, x, w, 8, 0.0f);
    double ms = 0;
    for (int i = 0; i < 8; i++) ms += x[i] * x[i];
    ms = sqrt(ms / 8);
    for (int i = 0; i < 8; i++) assert_float_equal(o[i], w[i] * x[i] / ms, 1e-5);

    float s[4] = {0, logf(2), logf(3), -INFINITY};
    sp_softmax(s, 4);
    assert_float_equal(s[0], 1.0 / 6, 1e-6);
    assert_float_equal(s[1], 2.0 / 6, 1e-6);
    assert_float_equal(s[2], 3.0 / 6, 1e-6);
    assert_float_equal(s[3], 0, 0);

    /* RoPE at position 0 is the identity; rotations preserve the norm of each
     * pair; norm style pairs (0,1), neox style pairs (0, d/2). */
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v0[8], inv[4], cs[8];
    for (int i = 0; i < 4; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / 8.0f);
    const sp_rope_freqs fr = {.theta_scale = powf(10000.0f, -2.0f / 8.0f), .freq_scale = 1.0f};
    memcpy(v0, v, sizeof v);
    sp_rope_cs(cs, 0, &fr, 8);
    sp_rope_apply(v, 1, 8, 8, cs, false);
    assert_memory_equal(v, v0, sizeof v);
    sp_rope_cs(cs, 5, &fr, 8);
    sp_rope_apply(v, 1, 8, 8, cs, false);
    assert_float_equal(hypotf(v[0], v[1]), hypotf(1, 2), 1e-5);
    assert_float_equal(v[0], cosf(5) * 1 - sinf(5) * 2, 1e-5);
    assert_float_equal(v[2], cosf(5 * inv[1]) * 3 - sinf(5 * inv[1]) * 4, 1e-5);
    memcpy(v, v0, sizeof v);
    sp_rope_apply(v, 1, 8, 8, cs, true);
    assert_float_equal(v[0], cosf(5) * 1 - sinf(5) * 5, 1e-5);
    assert_float_equal(v[4], sinf(5) * 1 + cosf(5) * 5, 1e-5);
    /* partial rotary: dims past rot_dim are left alone */
    memcpy(v, v0, sizeof v);
    sp_rope_apply(v, 1, 8, 4, cs, false);
    assert_float_equal(v[4], 5, 0);
    assert_float_equal(v[7], 8, 0);

    float g[3] = {0, 1, -1}, u[3] = {2, 2, 2}, r[3];
    sp_swiglu(r, g, u, 3);
    assert_float_equal(r[0], 0, 1e-7);
    assert_float_equal(r[1], 2 * 1 / (1 + expf(-1)), 1e-6);
    /* the rotation is ggml's fused form */
    float pr[2] = {3, 4};
    sp_rope_apply(pr, 1, 2, 2, cs + 2, false);
    assert_true(pr[0] == fmaf(3, cs[2], -(4 * cs[3])) && pr[1] == fmaf(3, cs[3], 4 * cs[2]));
    /* angles as ggml forms them: pos * theta_scale^i by repeated products */
    assert_true(cs[2] == cosf(5.0f * fr.theta_scale) && cs[4] == cosf(5.0f * fr.theta_scale * fr.theta_scale));
}

/* Attention kernels of every ISA give the scalar reference's bits (ggml's
 * order, ops.h), for head sizes with and without a 64-dim tail; the
 * reference's dot is ggml's lane order, close to a double dot; mix reads
 * rank r's row through idx and leaves zero-weight ranks out entirely. */
static void test_attention_kernels(void **state) {
    (void)state;
    const int32_t hds[] = {8, 20, 64, 80, 128, 256};
    const int32_t n = 37, stride = 260;
    sp_rng r;
    sp_rng_seed(&r, 9);
    float *kv = malloc((size_t)(n * stride) * sizeof(float)), q[256], p[37];
    int32_t idx[37];
    for (int32_t i = 0; i < n * stride; i++) kv[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < 256; i++) q[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < n; i++) p[i] = i % 5 == 3 ? 0.0f : (float)sp_rng_uniform(&r);
    for (int i = 0; i < n; i++) idx[i] = i % 5 == 3 ? i : n - 1 - i; /* any rows, in any order */
    kv[3 * stride] = NAN; /* rank 3 has p = 0: must not reach the output */
    sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int32_t hd = hds[hi];
        float ref_s[37], ref_o[256], ref_oi[256];
        assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
        sp_ops_att_scores()(q, kv + 4 * stride, stride, n - 4, hd, 0.5f, ref_s);
        sp_ops_att_mix()(p, NULL, kv, stride, n, hd, ref_o);
        sp_ops_att_mix()(p, idx, kv, stride, n, hd, ref_oi);
        for (int32_t j = 0; j < n - 4; j++) {
            double d = 0, b = 0;
            for (int32_t i = 0; i < hd; i++) {
                d += 0.5 * (double)q[i] * kv[(j + 4) * stride + i];
                b += 0.5 * fabs(q[i] * kv[(j + 4) * stride + i]);
            }
            assert_true(fabs(ref_s[j] - d) <= 1e-5 * b + 1e-7);
        }
        for (int32_t i = 0; i < hd; i++) {
            double d = 0, b = 0;
            for (int32_t j = 0; j < n; j++)
                if (p[j] != 0) d += (double)p[j] * kv[j * stride + i], b += fabs(p[j] * kv[j * stride + i]);
            assert_false(isnan(ref_o[i]));
            assert_false(isnan(ref_oi[i]));
            assert_true(fabs(ref_o[i] - d) <= 1e-5 * b + 1e-7);
        }
        for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
            float s[37], o[256], oi[256];
            assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
            sp_ops_att_scores()(q, kv + 4 * stride, stride, n - 4, hd, 0.5f, s);
            sp_ops_att_mix()(p, NULL, kv, stride, n, hd, o);
            sp_ops_att_mix()(p, idx, kv, stride, n, hd, oi);
            assert_memory_equal(s, ref_s, (size_t)(n - 4) * sizeof(float));
            assert_memory_equal(o, ref_o, (size_t)hd * sizeof(float));
            assert_memory_equal(oi, ref_oi, (size_t)hd * sizeof(float));
        }
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(kv);
}

/* The attention kernels over F16 and Q8_0 caches (ops.h): the scalar
 * references are within a rounding budget of a double computation over the
 * stored (converted) values, and every ISA gives their bits; ranks with
 * p = 0 never reach the output (a NaN row there). */
static void test_attention_kv_kernels(void **state) {
    (void)state;
    const int32_t hds[] = {8, 24, 32, 64, 96, 128, 320};
    const int32_t n = 37, dim = 320;
    sp_rng r;
    sp_rng_seed(&r, 11);
    float *x = malloc((size_t)n * dim * sizeof(float)), q[320], p[37];
    int32_t idx[37];
    for (int32_t i = 0; i < n * dim; i++) x[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < dim; i++) q[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < n; i++) p[i] = i % 5 == 3 ? 0.0f : (float)sp_rng_uniform(&r);
    /* f16 subnormals, a value rounding to 0 and the tie at 2^-25 */
    p[5] = 3e-6f, p[6] = 1e-9f, p[7] = 0x1p-25f, p[9] = 0x1.8p-24f;
    for (int i = 0; i < n; i++) idx[i] = i % 5 == 3 ? i : n - 1 - i;
    x[3 * dim] = NAN;
    const sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    const sp_ggml_type types[] = {SP_GGML_F16, SP_GGML_Q8_0};
    for (int ti = 0; ti < 2; ti++) {
        const sp_ggml_type t = types[ti];
        const size_t row = t == SP_GGML_F16 ? (size_t)dim * 2 : (size_t)dim / 32 * 34;
        uint8_t *rows = malloc((size_t)n * row), qc[320 * 4];
        float *deq = malloc((size_t)n * dim * sizeof(float)), qd[320];
        for (int32_t j = 0; j < n; j++) {
            sp_ops_att_query(t, x + (size_t)j * dim, dim, rows + (size_t)j * row);
            sp_dequantize_row(t, rows + (size_t)j * row, deq + (size_t)j * dim, dim);
        }
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            const int32_t hd = hds[hi];
            if (t == SP_GGML_Q8_0 && hd % 32) continue;
            sp_ops_att_query(t, q, hd, qc);
            sp_dequantize_row(t, qc, qd, hd);
            float ref_s[37], ref_o[320], ref_oi[320];
            assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
            sp_ops_att_scores_kv(t)(qc, rows + 4 * row, row, n - 4, hd, 0.5f, ref_s);
            sp_ops_att_mix_kv(t)(p, NULL, rows, row, n, hd, ref_o);
            sp_ops_att_mix_kv(t)(p, idx, rows, row, n, hd, ref_oi);
            for (int32_t j = 0; j < n - 4; j++) {
                double d = 0, b = 0;
                for (int32_t i = 0; i < hd; i++) {
                    d += 0.5 * (double)qd[i] * deq[(size_t)(j + 4) * dim + i];
                    b += 0.5 * fabs(qd[i] * deq[(size_t)(j + 4) * dim + i]);
                }
                assert_true(fabs(ref_s[j] - d) <= 1e-5 * b + 1e-7);
            }
            for (int32_t i = 0; i < hd; i++) {
                double d = 0, b = 0;
                for (int32_t j = 0; j < n; j++) {
                    /* F16 values weigh by p rounded to f16 (within 2^-11 relative of p) */
                    const double pj = p[j];
                    if (pj != 0) d += pj * deq[(size_t)j * dim + i], b += fabs(pj * deq[(size_t)j * dim + i]);
                }
                const double tol = (t == SP_GGML_F16 ? 5e-4 : 1e-5) * b + 1e-7;
                assert_false(isnan(ref_o[i]));
                assert_true(fabs(ref_o[i] - d) <= tol);
                assert_false(isnan(ref_oi[i]));
            }
            for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
                float s[37], o[320], oi[320];
                assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
                sp_ops_att_scores_kv(t)(qc, rows + 4 * row, row, n - 4, hd, 0.5f, s);
                sp_ops_att_mix_kv(t)(p, NULL, rows, row, n, hd, o);
                sp_ops_att_mix_kv(t)(p, idx, rows, row, n, hd, oi);
                assert_memory_equal(s, ref_s, (size_t)(n - 4) * sizeof(float));
                assert_memory_equal(o, ref_o, (size_t)hd * sizeof(float));
                assert_memory_equal(oi, ref_oi, (size_t)hd * sizeof(float));
            }
        }
        free(rows);
        free(deq);
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(x);
}

/* The accumulating mixes (ops.h) of every ISA and cache type, fed the
 * ranks in uneven pieces (cuts off the 16-rank lanes, an empty piece), give
 * the scalar reference's one-piece bits, through idx and without, for head
 * sizes with and without a register-held path. */
static void test_attention_mix_pieces(void **state) {
    (void)state;
    enum { N = 77, DIM = 256 };
    const int32_t hds[] = {16, 32, 64, 96, 128, 160, 256};
    const int32_t cuts[] = {0, 5, 21, 21, 40, 63, N};
    sp_rng r;
    sp_rng_seed(&r, 13);
    float *x = malloc((size_t)N * DIM * sizeof(float)), p[N];
    int32_t idx[N];
    for (int32_t i = 0; i < N * DIM; i++) x[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < N; i++) p[i] = i % 7 == 2 ? 0.0f : (float)sp_rng_uniform(&r);
    for (int i = 0; i < N; i++) idx[i] = (i * 31) % N;
    const sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    const sp_ggml_type types[] = {SP_GGML_F32, SP_GGML_F16, SP_GGML_Q8_0};
    float *acc = malloc(16 * DIM * sizeof(float));
    for (int ti = 0; ti < 3; ti++) {
        const sp_ggml_type t = types[ti];
        const size_t row = t == SP_GGML_F32 ? DIM * 4 : t == SP_GGML_F16 ? DIM * 2 : DIM / 32 * 34;
        uint8_t *rows = malloc((size_t)N * row);
        for (int32_t j = 0; j < N; j++) sp_kv_convert_row(t, x + (size_t)j * DIM, rows + (size_t)j * row, DIM);
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            const int32_t hd = hds[hi];
            if (t == SP_GGML_Q8_0 && hd % 32) continue;
            for (int withidx = 0; withidx < 2; withidx++) {
                const int32_t *ix = withidx ? idx : NULL;
                float ref[DIM], o[DIM];
                assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
                memset(acc, 0, 16 * DIM * sizeof(float));
                sp_ops_att_mix_acc(t)(p, ix, rows, row, 0, N, hd, acc, DIM);
                sp_att_mix_finish(acc, DIM, hd, ref);
                for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
                    assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
                    memset(acc, 0, 16 * DIM * sizeof(float));
                    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++)
                        sp_ops_att_mix_acc(t)(p, ix, rows, row, cuts[c], cuts[c + 1], hd, acc, DIM);
                    sp_att_mix_finish(acc, DIM, hd, o);
                    if (memcmp(o, ref, (size_t)hd * sizeof(float)))
                        fail_msg("%s %s hd=%d idx=%d: pieces differ from the whole", sp_ops_isa_name((sp_isa)isa),
                                 sp_ggml_type_name(t), hd, withidx);
                }
            }
        }
        free(rows);
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(acc);
    free(x);
}

/* The widened F16 kernels (ops.h) give the F16 kernels' bits on rows
 * widened once, on every ISA: the widening is exact, the scores over
 * widened keys equal the F16 scores (16-slot groups and a tail), the mix
 * over widened values (in pieces, through idx and without) equals the F16
 * mix. */
static void test_attention_wide_kernels(void **state) {
    (void)state;
    enum { N = 37, DIM = 320 };
    const int32_t hds[] = {16, 32, 48, 64, 128, 320};
    sp_rng r;
    sp_rng_seed(&r, 17);
    float *x = malloc((size_t)N * DIM * sizeof(float)), q[DIM], p[N];
    int32_t idx[N];
    for (int32_t i = 0; i < N * DIM; i++) x[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < DIM; i++) q[i] = (float)sp_rng_normal(&r);
    for (int i = 0; i < N; i++) p[i] = i % 6 == 1 ? 0.0f : (float)sp_rng_uniform(&r);
    p[4] = 1e-9f, p[8] = 0x1p-25f; /* rounds to 0 in f16; the tie */
    for (int i = 0; i < N; i++) idx[i] = (i * 11) % N;
    uint8_t *rows = malloc((size_t)N * DIM * 2);
    for (int32_t j = 0; j < N; j++) sp_kv_convert_row(SP_GGML_F16, x + (size_t)j * DIM, rows + (size_t)j * DIM * 2, DIM);
    float *wide = malloc((size_t)N * DIM * sizeof(float)), *acc = malloc(16 * DIM * sizeof(float));
    const sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
        assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            const int32_t hd = hds[hi];
            /* widening: exact, rows hd apart */
            sp_ops_att_widen()(rows, DIM * 2, N, hd, wide);
            for (int32_t j = 0; j < N; j++)
                for (int32_t i = 0; i < hd; i++)
                    assert_true(wide[(size_t)j * hd + i] == sp_fp16_to_fp32(((const uint16_t *)rows)[(size_t)j * DIM + i]));
            uint16_t qh[DIM];
            float qw[DIM], s1[N], s2[N];
            sp_ops_att_query(SP_GGML_F16, q, hd, qh);
            for (int32_t i = 0; i < hd; i++) qw[i] = sp_fp16_to_fp32(qh[i]);
            sp_ops_att_scores_kv(SP_GGML_F16)(qh, rows, DIM * 2, N, hd, 0.25f, s1);
            sp_ops_att_scores_wide()(qw, wide, N, hd, 0.25f, s2);
            if (memcmp(s1, s2, sizeof s1)) fail_msg("%s hd=%d: wide scores differ", sp_ops_isa_name((sp_isa)isa), hd);
            for (int withidx = 0; withidx < 2; withidx++) {
                const int32_t *ix = withidx ? idx : NULL;
                float o1[DIM], o2[DIM];
                memset(acc, 0, 16 * DIM * sizeof(float));
                sp_ops_att_mix_acc(SP_GGML_F16)(p, ix, rows, DIM * 2, 0, N, hd, acc, DIM);
                sp_att_mix_finish(acc, DIM, hd, o1);
                memset(acc, 0, 16 * DIM * sizeof(float));
                sp_ops_att_mix_acc_wide()(p, ix, wide, (size_t)hd * sizeof(float), 0, 19, hd, acc, DIM);
                sp_ops_att_mix_acc_wide()(p, ix, wide, (size_t)hd * sizeof(float), 19, N, hd, acc, DIM);
                sp_att_mix_finish(acc, DIM, hd, o2);
                if (memcmp(o1, o2, (size_t)hd * sizeof(float)))
                    fail_msg("%s hd=%d idx=%d: wide mix differs", sp_ops_isa_name((sp_isa)isa), hd, withidx);
            }
        }
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(x);
    free(rows);
    free(wide);
    free(acc);
}

/* The grouped F16 kernels (ops.h) give each row the bits of the scalar F16
 * kernels on its own: 1 to 6 rows, head sizes 16..320, slot counts with
 * 16-slot steps and tails, rank ranges from odd starts, probabilities that
 * are 0 or round to 0 in f16. */
static void test_attention_grp_kernels(void **state) {
    (void)state;
    enum { N = 53, DIM = 320, R = 6 };
    const int32_t hds[] = {16, 48, 64, 128, 320};
    sp_rng r;
    sp_rng_seed(&r, 23);
    float *x = malloc((size_t)N * DIM * sizeof(float)), q[R][DIM], p[R][N];
    for (int32_t i = 0; i < N * DIM; i++) x[i] = (float)sp_rng_normal(&r);
    for (int j = 0; j < R; j++) {
        for (int i = 0; i < DIM; i++) q[j][i] = (float)sp_rng_normal(&r);
        for (int i = 0; i < N; i++) p[j][i] = (i + j) % 5 == 1 ? 0.0f : (float)sp_rng_uniform(&r);
        p[j][4] = 1e-9f;
    }
    uint8_t *rows = malloc((size_t)N * DIM * 2);
    for (int32_t j = 0; j < N; j++) sp_kv_convert_row(SP_GGML_F16, x + (size_t)j * DIM, rows + (size_t)j * DIM * 2, DIM);
    float *acc1 = malloc((size_t)R * 16 * DIM * sizeof(float)), *acc2 = malloc((size_t)R * 16 * DIM * sizeof(float));
    const sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (int32_t nr = 1; nr <= R; nr++) {
                const int32_t hd = hds[hi];
                uint16_t qh[R][DIM];
                float s1[R][N], s2[R][N];
                assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
                for (int32_t j = 0; j < nr; j++) {
                    sp_ops_att_query(SP_GGML_F16, q[j], hd, qh[j]);
                    sp_ops_att_scores_kv(SP_GGML_F16)(qh[j], rows, DIM * 2, N, hd, 0.125f, s1[j]);
                }
                memset(acc1, 0, (size_t)R * 16 * DIM * sizeof(float));
                for (int32_t j = 0; j < nr; j++) {
                    sp_ops_att_mix_acc(SP_GGML_F16)(p[j], NULL, rows, DIM * 2, 0, 7, hd, acc1 + (size_t)j * 16 * DIM, DIM);
                    sp_ops_att_mix_acc(SP_GGML_F16)(p[j], NULL, rows, DIM * 2, 7, N, hd, acc1 + (size_t)j * 16 * DIM, DIM);
                }
                assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
                if (!sp_ops_att_scores_grp() || !sp_ops_att_mix_grp()) continue; /* none on this ISA */
                sp_ops_att_scores_grp()(qh, sizeof qh[0], nr, rows, DIM * 2, N, hd, 0.125f, &s2[0][0], N);
                for (int32_t j = 0; j < nr; j++)
                    if (memcmp(s1[j], s2[j], sizeof s1[j]))
                        fail_msg("%s hd=%d rows=%d: grouped scores of row %d differ", sp_ops_isa_name((sp_isa)isa), hd,
                                 nr, j);
                memset(acc2, 0, (size_t)R * 16 * DIM * sizeof(float));
                sp_ops_att_mix_grp()(&p[0][0], N, nr, rows, DIM * 2, 0, 7, hd, acc2, (size_t)16 * DIM, DIM);
                sp_ops_att_mix_grp()(&p[0][0], N, nr, rows, DIM * 2, 7, N, hd, acc2, (size_t)16 * DIM, DIM);
                for (int32_t j = 0; j < nr; j++) {
                    float o1[DIM], o2[DIM];
                    sp_att_mix_finish(acc1 + (size_t)j * 16 * DIM, DIM, hd, o1);
                    sp_att_mix_finish(acc2 + (size_t)j * 16 * DIM, DIM, hd, o2);
                    if (memcmp(o1, o2, (size_t)hd * sizeof(float)))
                        fail_msg("%s hd=%d rows=%d: grouped mix of row %d differs", sp_ops_isa_name((sp_isa)isa), hd,
                                 nr, j);
                }
            }
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(x);
    free(rows);
    free(acc1);
    free(acc2);
}

/* sp_fwht is the orthonormal Walsh-Hadamard matrix (Sylvester order) to
 * within float rounding, and applying it twice gives the input back. */
static void test_fwht(void **state) {
    (void)state;
    enum { N = 128 };
    float x[2 * N], y[2 * N];
    sp_rng r;
    sp_rng_seed(&r, 5);
    for (int i = 0; i < 2 * N; i++) x[i] = y[i] = (float)sp_rng_normal(&r);
    sp_fwht(y, 2 * N, N);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < N; i++) {
            double d = 0;
            for (int j = 0; j < N; j++) d += (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) * x[h * N + j];
            assert_true(fabs(y[h * N + i] - d / sqrt(N)) < 1e-5);
        }
    sp_fwht(y, 2 * N, N);
    for (int i = 0; i < 2 * N; i++) assert_true(fabs(y[i] - x[i]) < 1e-5);
}

/* Each ISA's softmax gives the scalar reference's bits, which are within
 * 1e-6 relative of a double softmax; -inf gives exactly 0. */
static void test_softmax_kernels(void **state) {
    (void)state;
    sp_rng r;
    sp_rng_seed(&r, 9);
    for (int n = 1; n <= 70; n += 3) {
        float x[70], ref[70];
        for (int i = 0; i < n; i++) x[i] = (float)(sp_rng_normal(&r) * 8);
        if (n > 4) x[3] = -INFINITY;
        memcpy(ref, x, sizeof x);
        sp_softmax(ref, n);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
        for (int i = 0; i < n; i++) {
            const double want = exp((double)x[i] - mx) / sum;
            assert_true(fabs(ref[i] - want) <= 1e-6 * want + 1e-12);
        }
        if (n > 4) assert_true(ref[3] == 0.0f);
        for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
            sp_error err = {0};
            float y[70];
            memcpy(y, x, sizeof x);
            assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
            sp_ops_softmax()(y, n);
            assert_memory_equal(y, ref, (size_t)n * sizeof(float));
        }
    }
    sp_error err = {0};
    assert_int_equal(sp_ops_set_isa(sp_ops_best_isa(), &err), SP_OK);
}

/* sp_exp_ggml stays within 2 ulp of exp over the float range, gives 0 and
 * inf past it and keeps NaN; every ISA's swiglu gives the scalar
 * reference's bits (16-lane groups and the expf tail). */
static void test_exp_swiglu(void **state) {
    (void)state;
    int64_t worst = 0;
    for (float x = -103.0f; x <= 88.5f; x += 0.0137f) {
        const float e = sp_exp_ggml(x), want = (float)exp((double)x);
        int32_t a, b;
        memcpy(&a, &e, 4), memcpy(&b, &want, 4);
        if (want >= 0x1p-126f) worst = llabs((long long)a - b) > worst ? llabs((long long)a - b) : worst;
    }
    assert_true(worst <= 2);
    assert_true(sp_exp_ggml(-INFINITY) == 0.0f && sp_exp_ggml(-200.0f) == 0.0f);
    assert_true(isinf(sp_exp_ggml(200.0f)) && isinf(sp_exp_ggml(INFINITY)));
    assert_true(isnan(sp_exp_ggml(NAN)));
    assert_true(sp_exp_ggml(0.0f) == 1.0f);
    sp_rng r;
    sp_rng_seed(&r, 4);
    float g[100], u[100], ref[100], y[100];
    for (int i = 0; i < 100; i++) g[i] = (float)(sp_rng_normal(&r) * 6), u[i] = (float)sp_rng_normal(&r);
    /* exp(-x): inf, 0, past 2^127, subnormal, near the top */
    g[5] = -150.0f, g[6] = 150.0f, g[7] = -95.0f, g[8] = 95.0f, g[9] = -88.5f;
    sp_swiglu(ref, g, u, 100);
    for (int i = 0; i < 100; i++) {
        const double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(fabs(ref[i] - want) <= 1e-6 * fabs(want) + 1e-30);
    }
    for (int isa = 1; isa <= (int)sp_ops_best_isa(); isa++) {
        sp_error err = {0};
        assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
        sp_ops_swiglu()(y, g, u, 100);
        assert_memory_equal(y, ref, sizeof y);
    }
    sp_error err = {0};
    assert_int_equal(sp_ops_set_isa(sp_ops_best_isa(), &err), SP_OK);
}

/* ggml order (ops.h): while on, every ISA returns the same ggml-order
 * kernel for a quantised type and packs nothing; its outputs are close to
 * the reference's (the same integer sums, another float order), do not
 * depend on batch size or row splits, and switching off restores the usual
 * kernels. Its bits are checked against llama.cpp's by test_golden. */
static void test_ggml_order(void **state) {
    (void)state;
    static const sp_ggml_type qtypes[] = {SP_GGML_Q8_0, SP_GGML_Q4_0, SP_GGML_Q4_1, SP_GGML_Q5_0,
                                          SP_GGML_Q5_1, SP_GGML_IQ4_NL, SP_GGML_Q4_K, SP_GGML_Q5_K,
                                          SP_GGML_Q6_K, SP_GGML_IQ4_XS};
    assert_false(sp_ops_ggml_order());
    for (size_t ti = 0; ti < sizeof qtypes / sizeof qtypes[0]; ti++) {
        const sp_ggml_type type = qtypes[ti];
        fixture f;
        fx_make(&f, type, 21, 512, 13, 300 + ti);
        const size_t bytes = (size_t)(f.n * f.rows) * sizeof(float);
        float *yr = malloc(bytes), *ya = malloc(bytes), *yb = malloc(bytes), *yc = malloc(bytes);
        sp_mm m = fx_mm(&f, 0, f.n, yr);
        sp_ops_mm_isa(type, SP_ISA_SCALAR)(&m, 0, f.rows);
        sp_ops_set_ggml_order(true);
        const sp_mm_kernel g = sp_ops_mm_ggml_order(type);
        assert_non_null(g);
        for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
            assert_ptr_equal(sp_ops_mm_isa(type, (sp_isa)isa), g);
            assert_null(sp_ops_mm_packed_isa(type, (sp_isa)isa));
        }
        assert_false(sp_ops_packs(type));
        m.y = ya;
        g(&m, 0, f.rows);
        for (int32_t t = 0; t < f.n; t++) {
            sp_mm one = fx_mm(&f, t, 1, yb + t * f.rows);
            g(&one, 0, f.rows);
        }
        m.y = yc;
        g(&m, 0, 10);
        g(&m, 10, f.rows);
        sp_ops_set_ggml_order(false);
        assert_memory_equal(ya, yb, bytes);
        assert_memory_equal(ya, yc, bytes);
        for (int64_t i = 0; i < f.n * f.rows; i++)
            assert_true(fabs((double)ya[i] - yr[i]) <= 1e-5 * f.bound[i] + 1e-6);
        assert_ptr_not_equal(sp_ops_mm_isa(type, SP_ISA_SCALAR), g);
        free(yr), free(ya), free(yb), free(yc);
        fx_free(&f);
    }
    assert_null(sp_ops_mm_ggml_order(SP_GGML_F32));
}

/* The bandwidth probe's streaming read: every ISA returns the scalar sum. */
static void test_read_sum_isa_identical(void **state) {
    (void)state;
    const size_t bytes = 1 << 16;
    uint64_t *buf = aligned_alloc(64, bytes);
    sp_rng r;
    sp_rng_seed(&r, 5);
    uint64_t want = 0;
    for (size_t i = 0; i < bytes / 8; i++) want += buf[i] = (uint64_t)sp_rng_below(&r, 1ull << 62) * 3;
    sp_isa saved = sp_ops_isa();
    sp_error err = {0};
    for (int isa = 0; isa <= (int)sp_ops_best_isa(); isa++) {
        assert_int_equal(sp_ops_set_isa((sp_isa)isa, &err), SP_OK);
        assert_true(sp_ops_read_sum(buf, bytes) == want);
        assert_true(sp_ops_read_sum(buf + 32, 512) == sp_ops_read_sum(buf + 32, 256) + sp_ops_read_sum(buf + 64, 256));
    }
    assert_int_equal(sp_ops_set_isa(saved, &err), SP_OK);
    free(buf);
}

static void test_isa_selection(void **state) {
    (void)state;
    sp_error err = {0};
    assert_int_equal(sp_ops_set_isa(SP_ISA_SCALAR, &err), SP_OK);
    assert_int_equal(sp_ops_isa(), SP_ISA_SCALAR);
    assert_int_equal(sp_ops_set_isa(sp_ops_best_isa(), &err), SP_OK);
    assert_non_null(sp_ops_mm(SP_GGML_Q4_0));
    assert_null(sp_ops_mm(SP_GGML_IQ2_XXS));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_simd_matches_reference),
    cmocka_unit_test(test_float_isa_bit_identical), cmocka_unit_test(test_f16_vecdot_isa_bit_identical),
    cmocka_unit_test(test_read_sum_isa_identical),
    cmocka_unit_test(test_reference_accuracy),
    cmocka_unit_test(test_batch_and_split_invariance),
    cmocka_unit_test(test_batch_split_invariance_long_rows),
    cmocka_unit_test(test_packed_bit_identical),
    cmocka_unit_test(test_packed_blocked_bit_identical),
    cmocka_unit_test(test_packed_float_bit_identical),
    cmocka_unit_test(test_act_prepare_q8k_isa_identical),
    cmocka_unit_test(test_act_prepare),
    cmocka_unit_test(test_act_prepare_g4),
    cmocka_unit_test(test_act_prepare_isa_identical),
    cmocka_unit_test(test_row_kernels),
    cmocka_unit_test(test_attention_kernels),
    cmocka_unit_test(test_attention_kv_kernels),
    cmocka_unit_test(test_attention_mix_pieces),
    cmocka_unit_test(test_attention_wide_kernels),
    cmocka_unit_test(test_attention_grp_kernels),
    cmocka_unit_test(test_fwht),
    cmocka_unit_test(test_softmax_kernels),
    cmocka_unit_test(test_exp_swiglu),
    cmocka_unit_test(test_ggml_order),
    cmocka_unit_test(test_isa_selection),
};
SP_TEST_MAIN(tests)
