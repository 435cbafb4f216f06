/* train_mm_body.h: the trainer's matmul loops, included once per ISA by
 * train_mm.c, train_mm_avx2.c and train_mm_avx512.c (see train_mm.h);
 * TRAIN_MM_NAME names the table each defines. Not a normal header. */
#include <string.h>

#include "train_mm.h"

/* The loops vectorise with the file's ISA without reassociating sums:
 * clang does at -O2; gcc 12 needs the vectoriser turned on, with a cost
 * model that allows a remainder loop (-O2 allows none). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

/* Register tiles: 4 rows x TILE columns of outputs stay in vector
 * registers while the reduction index runs, so each output is loaded and
 * stored once per tile instead of once per step. The tile width follows
 * the ISA this copy is built for (the register file's size); each output
 * still receives its terms one by one in ascending order, exactly as the
 * plain loops would add them, so every width gives the same numbers. */
#if defined(__AVX512F__)
#define VW 16 /* floats per vector */
#define NQ 4  /* vectors per tile row: 16 accumulators of 32 registers */
#elif defined(__AVX__)
#define VW 8
#define NQ 2  /* 8 accumulators of 16 registers */
#else
#define VW 4
#define NQ 2
#endif
#define TILE (VW * NQ)

/* VW floats; element-wise operations on it are the scalar ones, lane by lane. */
typedef float vf __attribute__((vector_size(VW * sizeof(float))));
/* unaligned load / store (macros: a function returning a vector would have
 * an ISA-dependent ABI) */
#define LDV(v, p) memcpy(&(v), (p), sizeof(vf))
#define STV(p, v) memcpy((p), &(v), sizeof(vf))

/* c[k][:] (k < 4) += s[k] * row[0..TILE) for each of n rows row0 + j*stride,
 * scales s[k] = sc[k][j * sstride]. c holds tile rows acc[k] on entry and exit. */
static inline void tile_run(float acc[4][TILE], const float *row0, int64_t stride, int64_t n,
                            const float *const sc[4], int64_t sstride) {
    vf c[4][NQ];
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 4; k++)
        _Pragma("GCC unroll 16")
        for (int q = 0; q < NQ; q++) LDV(c[k][q], acc[k] + q * VW);
    for (int64_t j = 0; j < n; j++) {
        const float *row = row0 + j * stride;
        vf w[NQ];
        _Pragma("GCC unroll 16")
        for (int q = 0; q < NQ; q++) LDV(w[q], row + q * VW);
        _Pragma("GCC unroll 16")
        for (int k = 0; k < 4; k++) {
            const float s = sc[k][j * sstride];
            _Pragma("GCC unroll 16")
            for (int q = 0; q < NQ; q++) c[k][q] += w[q] * s;
        }
    }
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 4; k++)
        _Pragma("GCC unroll 16")
        for (int q = 0; q < NQ; q++) STV(acc[k] + q * VW, c[k][q]);
}

/* out[r][:] = sum_i inp[r][i] wt[i][:] (i ascending) for rows r of this thread. */
static void mm_fwd_job(void *arg, int ith, int nth) {
    const mm_args *a = arg;
    const int64_t I = a->I, O = a->O;
    const int64_t r0 = a->n * ith / nth, r1 = a->n * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r += 4) {
        const int64_t nr = r1 - r < 4 ? r1 - r : 4;
        const float *x[4];
        _Pragma("GCC unroll 16")
        for (int k = 0; k < 4; k++) x[k] = a->inp + (r + (k < nr ? k : 0)) * I; /* padding rows repeat row r */
        for (int64_t j0 = 0; j0 < O; j0 += TILE) {
            const int64_t jn = O - j0 < TILE ? O - j0 : TILE;
            float acc[4][TILE];
            memset(acc, 0, sizeof acc);
            if (jn == TILE) {
                tile_run(acc, a->wt + j0, O, I, x, 1);
            } else {
                for (int64_t i = 0; i < I; i++) {
                    const float *restrict wr = a->wt + i * O + j0;
                    _Pragma("GCC unroll 16")
                    for (int k = 0; k < 4; k++) {
                        const float xk = x[k][i];
                        for (int64_t jj = 0; jj < jn; jj++) acc[k][jj] += xk * wr[jj];
                    }
                }
            }
            for (int64_t k = 0; k < nr; k++) memcpy(a->out + (r + k) * O + j0, acc[k], (size_t)jn * sizeof(float));
        }
    }
}

/* dinp[r][:] += sum_o dout[r][o] w[o][:] (o ascending) */
static void mm_bwd_inp_job(void *arg, int ith, int nth) {
    const mm_args *a = arg;
    const int64_t I = a->I, O = a->O;
    const int64_t r0 = a->n * ith / nth, r1 = a->n * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r += 4) {
        const int64_t nr = r1 - r < 4 ? r1 - r : 4;
        const float *dr[4];
        _Pragma("GCC unroll 16")
        for (int k = 0; k < 4; k++) dr[k] = a->dout + (r + (k < nr ? k : 0)) * O; /* padding repeats row r */
        for (int64_t i0 = 0; i0 < I; i0 += TILE) {
            const int64_t in = I - i0 < TILE ? I - i0 : TILE;
            float acc[4][TILE];
            memset(acc, 0, sizeof acc);
            for (int64_t k = 0; k < nr; k++) memcpy(acc[k], a->dinp + (r + k) * I + i0, (size_t)in * sizeof(float));
            if (in == TILE) {
                tile_run(acc, a->w + i0, I, O, dr, 1);
            } else {
                for (int64_t o = 0; o < O; o++) {
                    const float *restrict wr = a->w + o * I + i0;
                    _Pragma("GCC unroll 16")
                    for (int k = 0; k < 4; k++)
                        for (int64_t jj = 0; jj < in; jj++) acc[k][jj] += dr[k][o] * wr[jj];
                }
            }
            for (int64_t k = 0; k < nr; k++) memcpy(a->dinp + (r + k) * I + i0, acc[k], (size_t)in * sizeof(float));
        }
    }
}

/* dw[o][:] += sum_r dout[r][o] inp[r][:] (r ascending; zero gradients add nothing) */
static void mm_bwd_w_job(void *arg, int ith, int nth) {
    const mm_args *a = arg;
    const int64_t I = a->I, O = a->O;
    const int64_t o0 = O * ith / nth, o1 = O * (ith + 1) / nth;
    for (int64_t o = o0; o < o1; o += 4) {
        const int64_t no = o1 - o < 4 ? o1 - o : 4;
        for (int64_t i0 = 0; i0 < I; i0 += TILE) {
            const int64_t in = I - i0 < TILE ? I - i0 : TILE;
            float acc[4][TILE];
            memset(acc, 0, sizeof acc);
            for (int64_t k = 0; k < no; k++) memcpy(acc[k], a->dw + (o + k) * I + i0, (size_t)in * sizeof(float));
            if (in == TILE) {
                vf c[4][NQ];
                _Pragma("GCC unroll 16")
                for (int k = 0; k < 4; k++)
                    _Pragma("GCC unroll 16")
                    for (int q = 0; q < NQ; q++) LDV(c[k][q], acc[k] + q * VW);
                for (int64_t r = 0; r < a->n; r++) {
                    const float *restrict xr = a->inp + r * I + i0;
                    vf x[NQ];
                    _Pragma("GCC unroll 16")
                    for (int q = 0; q < NQ; q++) LDV(x[q], xr + q * VW);
                    _Pragma("GCC unroll 16")
                    for (int k = 0; k < 4; k++) {
                        const float g = k < no ? a->dout[r * O + o + k] : 0.0f; /* padding: 0, skipped */
                        if (g == 0.0f) continue;
                        _Pragma("GCC unroll 16")
                        for (int q = 0; q < NQ; q++) c[k][q] += x[q] * g;
                    }
                }
                _Pragma("GCC unroll 16")
                for (int k = 0; k < 4; k++)
                    _Pragma("GCC unroll 16")
                    for (int q = 0; q < NQ; q++) STV(acc[k] + q * VW, c[k][q]);
            } else {
                for (int64_t r = 0; r < a->n; r++) {
                    const float *restrict xr = a->inp + r * I + i0;
                    for (int64_t k = 0; k < no; k++) {
                        const float g = a->dout[r * O + o + k];
                        if (g == 0.0f) continue;
                        for (int64_t jj = 0; jj < in; jj++) acc[k][jj] += g * xr[jj];
                    }
                }
            }
            for (int64_t k = 0; k < no; k++) memcpy(a->dw + (o + k) * I + i0, acc[k], (size_t)in * sizeof(float));
        }
    }
}

const sp_train_mm TRAIN_MM_NAME = {mm_fwd_job, mm_bwd_inp_job, mm_bwd_w_job};
