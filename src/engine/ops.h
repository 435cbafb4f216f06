/* ops: compute kernels for the forward pass.
 *
 * The matrix-vector product is the hot loop: y[t][r] = W[r] . x[t] for a
 * range of weight rows r and n activation rows t. Each weight row is read
 * once and applied to all n activations (this is what makes verifying many
 * draft tokens nearly as cheap as one). Every kernel exists as a scalar
 * reference; SIMD versions (AVX2, AVX-512+VNNI) are chosen once at start-up
 * and tested against it. Within one ISA, an output's accumulation order does
 * not depend on n or on how rows are split across threads, so evaluating n
 * tokens at once is bit-identical to n single-token calls.
 *
 * Activations are prepared for the weight type the way ggml prepares them,
 * so that quantised results agree with llama.cpp's:
 *  - F32/F16/BF16 weights read x as plain f32 (every ISA sums an output
 *    in 16 FMA lanes, element i into lane i mod 16, then sp_reduce16:
 *    tinyBLAS's order, the same bits on every ISA);
 *  - 32-block weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) read the "q8"
 *    layout: per 32-block, amax = max|x|, d = amax/127 kept as ggml keeps it
 *    (rounded to f16), q = round-to-nearest-even(x * 127/amax) (ggml's x86
 *    quantiser), sum = sum of q, s = f16(d * sum) (ggml's q8_1 s, used by
 *    the formats with an offset, Q4_1 and Q5_1; other types leave s
 *    unset). Row bytes: int8 qs[k], float d[k/32],
 *    int32 sum[k/32], float s[k/32];
 *  - K-quant weights (Q2_K..Q6_K, IQ4_XS) read the "q8_K" layout: per
 *    256-block, the element of largest magnitude `max` (with its sign),
 *    q = min(127, rne(x * -127/max)), d = 1/(-127/max) (float), and per 16
 *    elements the sum of q. Row bytes: int8 qs[k], float d[k/256],
 *    int32 bsum[k/16].
 * A non-finite input block gives d = NaN and q = 0 (no undefined float to
 * int conversion); the NaN reaches the outputs, where the forward pass
 * reports it.
 *
 * Q4_0 and Q8_0 rows carry an extension after the q8 layout (from offset sp_act_g4_off, see
 * the accessors below): per group g of four blocks b = 4g+c, c = 0..3,
 * int8 qs[g][128] with bytes 16c.. = elements 0-15 of block b and bytes
 * 64+16c.. = elements 16-31 (the order the AVX-512 Q4_0 kernel unpacks
 * nibbles in), float d[g][16] with d[g][4c+i] = d of block b, and int32
 * corr[g][16] with corr[g][4c+i] = -2 sum (Q4_0: the -8 nibble offset spread
 * over 4 lanes) or -32 sum (Q8_0: the +128 sign flip) of block b; blocks
 * past the row end are zero. After it (from sp_act_g4_off + sp_act_g4_bytes,
 * sp_act_corr below) comes int32 corr[k/32], the whole correction of block
 * b: -8 sum (Q4_0) or -128 sum (Q8_0), padded to 64 bytes. The kernels that
 * do not use these ignore them.
 *
 * Packed weights. Q8_0 and Q4_0 matrices (and the others below) can also
 * be held row-interleaved (made once at load, see sp_ops_pack), so that one
 * 512-bit dpbusd computes
 * 16 rows' partial dot products against one broadcast 4-byte group of an
 * activation block, and the per-block float step (scale product, multiply,
 * add) runs once per block for 16 rows, one row per lane. Layout: groups of
 * SP_PACK_ROWS = 16 rows (row 16g + i is lane i of group g; rows past the
 * matrix end are zero), sp_ops_pack_stride bytes apart. A group is a run of
 * units, one per pair of blocks b = 2u, 2u+1 (a block past the row end is
 * zero): QB bytes of quants of block 2u, QB of block 2u+1, then the 16 rows'
 * f16 scales d of block 2u (32 bytes) and of block 2u+1 (32 bytes); QB = 512
 * (Q8_0) or 256 (Q4_0), so units are 1088 or 576 bytes, 64-byte multiples.
 * The quants of a block are chunks j of 64 bytes (8 for Q8_0, 4 for Q4_0)
 * whose bytes 4i..4i+3 are row i's stored bytes qs[4j..4j+3]; Q8_0 bytes
 * are stored plus 128 (sign bit flipped: unsigned). So a Q8_0 chunk j pairs
 * with activation bytes 4j..4j+3; a Q4_0 chunk's low nibbles with 4j..4j+3
 * and its high nibbles with 16+4j..16+4j+3. The packed copy has the size of
 * the original matrix (rounded up to 16 rows and an even block count).
 * Kernels over it take sp_mm.w = the packed data, w_stride = the group
 * stride, and rows r0..r1 as usual; they form each output with the scalar
 * reference's integer sums and float expression in block order, so they
 * are bit-identical to it (and to each other) whatever n or the rows.
 * Q4_1, Q5_0, Q5_1 and IQ4_NL pack like Q4_0 (the stored nibbles in the
 * same chunks, pairs of blocks c = 0, 1 per unit), then: Q5_0/Q5_1 the
 * fifth bits as 64 bytes of masks per block c (the 8 bytes at 512 + 64c +
 * 8j: a little-endian 64-bit mask whose bit 4i + e is the fifth bit of row
 * i's element 4j + e, i.e. of chunk j's low nibble for j < 4, of chunk
 * j - 4's high nibble otherwise), the f16 d of the 16 rows (32 bytes per
 * block) and, for Q4_1/Q5_1, their f16 m (32 bytes per block): units of 640
 * (Q4_1), 704 (Q5_0), 768 (Q5_1), 576 (IQ4_NL) bytes, the size of 32 of
 * the original blocks. MXFP4 packs as IQ4_NL except for the scales: the
 * f32 d = 2^(e - 128) of the 16 rows (64 bytes per block, as f16 cannot
 * hold every E8M0 scale), units of 640 bytes.
 * Q4_K packs the same way with one unit of 2368 bytes per super-block b:
 * 2048 bytes of quants, chunk 8p + j (p < 4 pairs of sub-blocks, j < 8)
 * holding row i's qs[32p + 4j..+3] at bytes 4i.. (low nibbles: sub-block 2p
 * elements 4j..; high: sub-block 2p+1), then the 6-bit scales as bytes
 * [s][i] (128), the mins as bytes [p][i][s & 1] for s = 2p, 2p+1 (128), the
 * rows' f16 d (32) and dmin (32). Q5_K's unit (2880 bytes) is Q4_K's with
 * 512 bytes of fifth-bit masks after the quants (the 8 bytes at 64s + 8j: a
 * little-endian 64-bit mask whose bit 4i + e is the fifth bit of row i's
 * element 32s + 4j + e, i.e. of the nibble chunk 8(s/2) + j holds at byte
 * 4i + e), the rest following at Q4_K's offsets plus 512. Their activation rows
 * carry, after the q8_K layout (sp_actk_pairs), int32 pairs[k/256][4]:
 * int16 halves (lo, hi) = the sums over sub-blocks 2p and 2p+1 of 32
 * elements each, padded to 64 bytes. IQ4_XS: one unit of 2240 bytes per
 * super-block: per sub-block s < 8 of 32, Q4_0's 4 chunks of its 16 bytes
 * qs[16s..] (256 bytes at 256s), then the rows' signed 6-bit scales (ls -
 * 32) as int8 [p][i][s & 1] for s = 2p, 2p+1 (128), the f16 d (32), 32 zero
 * bytes; its activation rows carry the pair sums too. Q6_K: one unit of 3456 bytes per super-block: 2048 bytes of ql
 * chunks 16h + 8m + c (row i's ql[64h + 32m + 4c..+3] at bytes 4i..), 1024
 * of qh chunks 8h + c (qh[32h + 4c..+3]), the int8 scales as bytes [s][i]
 * (256), int32 nc[i] = -128 * sum over the 16 sub-blocks s of scale_s times
 * the sum of s's values q (64), the f16 d (32), 32 zero bytes. Its kernels
 * take signed weights against unsigned activations: Q6_K activation rows
 * carry, after the q8_K layout (sp_actk_u8), the k bytes q + 128, so that
 * sum(q_w (q_x + 128)) = sum(q_w q_x) + 128 sum(q_w), and nc removes the
 * second term of the scaled sum (the one-token AVX-512 kernel instead
 * takes the unsigned values 0..63 against the signed q, each 16-element
 * dot starting at -32 times its bsum: the same integers). Q3_K: one unit of 1920 bytes per
 * super-block: its qs as 16 chunks c = 8h + cc (row i's qs[4c..4c+3] at
 * bytes 4i..; bits 2j of a byte give element 128h + 32j + 4cc + e), 512
 * bytes of masks (the 8 bytes at 1024 + 8(32h + 8j + cc): bit 4i + e set
 * where that element's high bit is clear, i.e. its value is lowered by 4),
 * the int8 scales as bytes [s][i] (256), int32 nc[i] as Q6_K's (64), the
 * f16 d (32), 32 zero bytes; its activation rows carry the bytes q + 128 as
 * Q6_K's. Q2_K: one unit of 1344 bytes (the original size): qs chunks as
 * Q3_K's, the scale bytes (scale | min << 4) as [p][i][s & 1] for s = 2p,
 * 2p+1 (256), f16 d (32), f16 dmin (32); its activation rows carry, after
 * the q8_K layout (sp_actk_pairs16), int32 pairs16[k/32]: int16 halves
 * (lo, hi) = the 16-sums of sub-blocks 2p and 2p+1, padded to 64 bytes.
 * F32, F16 and BF16 pack into steps of 16 elements: step j of a group is
 * 256 elements (256 * ESZ bytes, ESZ the element size), row i's elements
 * 16j..16j+15 at element 16i of the step (zeros past the row end), so a
 * group is one sequential stream and a row's 16-element vectors are one
 * step apart. The kernels over it keep the unpacked kernels' per-row
 * arithmetic (the same 16-lane FMA sequence and final reduction), so they
 * are bit-identical to the ordinary kernels, which are bit-identical
 * across ISAs (the scalar reference emulates the 16 lanes with fmaf). */
#ifndef SP_OPS_H
#define SP_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "sp_status.h"

typedef enum sp_isa { SP_ISA_SCALAR = 0, SP_ISA_AVX2 = 1, SP_ISA_AVX512 = 2, SP_ISA_COUNT } sp_isa;

typedef struct sp_mm {
    sp_ggml_type wtype;
    const uint8_t *w;  /* weight rows, w_stride bytes apart */
    size_t w_stride;
    int64_t k;         /* row length (elements) */
    const void *x;     /* n activation rows, x_stride bytes apart */
    size_t x_stride;
    int32_t n;
    float *y;          /* y[t * ld_y + r] */
    int64_t ld_y;
} sp_mm;

typedef void (*sp_mm_kernel)(const sp_mm *m, int64_t r0, int64_t r1);

/* Detects the CPU's features once (thread-safe) and applies $SPECULA_ISA
 * (scalar|avx2|avx512). SP_ERR_ARG, naming the variable, when its value is
 * unknown or asks for instructions this CPU lacks; the best ISA stays in use
 * then. Every entry point below initialises implicitly; callers that can
 * report errors (context creation) call this first. */
sp_status sp_ops_init(sp_error *err);
/* Best ISA this CPU supports (cpuid + xgetbv), and the one in use. */
sp_isa sp_ops_best_isa(void);
sp_isa sp_ops_isa(void);
const char *sp_ops_isa_name(sp_isa isa);
/* Select the kernels used from now on (SP_ERR_UNSUPPORTED if the CPU lacks
 * it). The default is the best ISA, or $SPECULA_ISA (scalar|avx2|avx512). */
sp_status sp_ops_set_isa(sp_isa isa, sp_error *err);

/* Matmul kernel for a weight type in the active ISA (or a given one; NULL
 * when the type is not supported or the CPU lacks the ISA). */
sp_mm_kernel sp_ops_mm(sp_ggml_type wtype);
sp_mm_kernel sp_ops_mm_isa(sp_ggml_type wtype, sp_isa isa);

/* ggml order (ops_ggml.c): the quantised matmuls summed in the float order
 * of llama.cpp's x86 CPU kernels, so that logits can be checked against its
 * own bit for bit; slower, on unpacked weights. Off by default;
 * $SPECULA_GGML_ORDER=1 or sp_ops_set_ggml_order turns it on. While on,
 * sp_ops_mm and sp_ops_mm_isa return these kernels for the types that
 * have one (every quantised type), the same in every ISA, and
 * sp_ops_packs / sp_ops_mm_packed say no packing for them (weights packed
 * earlier are then read unpacked). sp_ops_mm_ggml_order: the kernel, or
 * NULL. */
void sp_ops_set_ggml_order(bool on);
bool sp_ops_ggml_order(void);
sp_mm_kernel sp_ops_mm_ggml_order(sp_ggml_type wtype);

/* Packed weights (see the top). sp_ops_packs: the active ISA computes wtype
 * faster from the packed layout (so the loader makes a packed copy). The
 * kernels over the packed layout: NULL when the ISA has none (its ordinary
 * kernel on the original rows is used then; the scalar tier has the
 * reference twin). */
#define SP_PACK_ROWS 16
bool sp_ops_packs(sp_ggml_type wtype);
bool sp_ops_packable(sp_ggml_type wtype);
size_t sp_ops_pack_stride(sp_ggml_type wtype, int64_t k);
size_t sp_ops_pack_bytes(sp_ggml_type wtype, int64_t rows, int64_t k);
/* Write `rows` rows of k elements (w_stride bytes apart) packed into dst
 * (sp_ops_pack_bytes bytes, 64-byte aligned). */
void sp_ops_pack(sp_ggml_type wtype, const uint8_t *w, size_t w_stride, int64_t rows, int64_t k,
                 uint8_t *dst);
sp_mm_kernel sp_ops_mm_packed(sp_ggml_type wtype);
sp_mm_kernel sp_ops_mm_packed_isa(sp_ggml_type wtype, sp_isa isa);

/* F16 weights against f16-valued f32 activations in the order of ggml's
 * vec_dot_f16 on AVX-512 (what llama.cpp's mul_mat_id, the expert matmul,
 * computes with; its dense matmuls use tinyBLAS's order, the kernels
 * above): per output, for the first k/64*64 elements 4 x 16 lanes
 * a_j[l] = fma(w_i, x_i, a_j[l]) with i = 64c + 16j + l; a_0 + a_2 and
 * a_1 + a_3, those two added, sp_reduce16 of that widened to double; then
 * each remaining element's float product w_i x_i added in double; the
 * result rounded to float. Over the original rows (not packed); the same
 * bits in every ISA (AVX2 uses the scalar reference). */
sp_mm_kernel sp_ops_mm_f16_vecdot(void);
sp_mm_kernel sp_ops_mm_f16_vecdot_isa(sp_isa isa);

/* Activation layout for a weight type (see the top). */
typedef enum sp_act_kind { SP_ACT_F32, SP_ACT_Q8, SP_ACT_Q8_K } sp_act_kind;
sp_act_kind sp_ops_act_kind(sp_ggml_type wtype);
/* True for the quantised layouts (q8 and q8_K). */
bool sp_ops_act_is_q8(sp_ggml_type wtype);
/* Bytes of one prepared activation row of length k (64-byte multiple). */
size_t sp_ops_act_bytes(sp_ggml_type wtype, int64_t k);
/* Write x (k floats) as an activation row for wtype into dst. */
void sp_ops_act_prepare(sp_ggml_type wtype, const float *x, int64_t k, void *dst);

/* Element-wise and row kernels (scalar; the compiler vectorises them). */
void sp_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* RoPE in two steps, with ggml's arithmetic (the rotated queries and keys
 * are then llama.cpp's bits, which keeps its int8 activation roundings).
 * sp_rope_cs fills cs[2i], cs[2i+1] = cosf, sinf of the angle
 * a_i = freq_scale * (theta_i / factors[i]) for i < rot_dim/2, where
 * theta_0 = pos and theta_{i+1} = theta_i * theta_scale, float products in
 * that order (theta_scale = base^(-2/rot_dim); factors NULL: none).
 * sp_rope_apply rotates pairs (x0, x1) = (x[2i], x[2i+1]) ("norm" style,
 * llama) or (x[i], x[i+rot_dim/2]) ("neox" style) of each head's first
 * rot_dim dims to fma(x0, c, -(x1 s)), fma(x0, s, x1 c) (the FMAs GCC makes
 * of ggml's x0*c - x1*s, x0*s + x1*c). One cs table per token serves every
 * layer and both q and k. */
typedef struct sp_rope_freqs {
    float theta_scale, freq_scale;
    const float *factors; /* [rot_dim/2] or NULL */
    /* YaRN (ggml's rope_yarn) when yarn is set: with t_e = theta_i / factors[i]
     * and t_i = freq_scale * t_e, ramp r = (1 - clamp((i - corr[0]) /
     * max(0.001, corr[1] - corr[0]), 0, 1)) * ext_factor, the angle is
     * t_i (1 - r) + t_e r and cos, sin are scaled by attn_factor (times
     * 1 + 0.1 ln(1 / freq_scale) when ext_factor != 0); corr from
     * sp_rope_yarn_init. */
    bool yarn;
    float ext_factor, attn_factor, corr[2];
} sp_rope_freqs;
/* YaRN's correction dims for a RoPE of rot_dim dimensions, base and
 * original context n_ctx_orig (ggml_rope_yarn_corr_dims): floor and ceil of
 * rot_dim ln(n_ctx_orig / (2 pi beta)) / (2 ln base) for beta_fast and
 * beta_slow, clamped to [0, rot_dim - 1]. */
void sp_rope_yarn_corr(int32_t rot_dim, int32_t n_ctx_orig, float base, float beta_fast, float beta_slow,
                       float corr[2]);
void sp_rope_cs(float *cs, int32_t pos, const sp_rope_freqs *f, int32_t rot_dim);
void sp_rope_apply(float *x, int32_t n_heads, int32_t head_dim, int32_t rot_dim, const float *cs,
                   bool neox);
void sp_softmax(float *x, int64_t n);
/* The orthonormal Walsh-Hadamard transform of each run of n floats of x
 * (len a multiple of n, n a power of 2), as ggml's CPU fwht: every value
 * times 1/sqrtf(n) first, then butterflies (u + v, u - v) at spans 1, 2,
 * 4, ... n/2. llama.cpp rotates queries and keys (and values, and the
 * attention output back) by it when the cache holding them is quantised. */
void sp_fwht(float *x, int64_t len, int32_t n);
/* The softmax above with one more logit, `sink`, whose weight is dropped
 * (gpt-oss's attention sinks), as ggml's soft_max with sinks: the max over
 * x and sink, then x's exps and group sums as above, then expf(sink - max)
 * added to the sum. Scalar in every ISA. */
void sp_softmax_sink(float *x, int64_t n, float sink);
/* exp(x) as ggml's AVX-512 vector expf computes it (a degree-5 polynomial
 * on x - n ln2, n = round(x / ln2), scaled by 2^n; |n| > 192 gives 0 or
 * inf): within ~2 ulp of expf, but these bits, not expf's. */
float sp_exp_ggml(float x);
/* One row of n: out[i] = silu(g[i]) * u[i] with silu(x) = x / (1 + e),
 * e = sp_exp_ggml(0 - x) for the first n/16*16 elements and expf(-x) for
 * the rest, as ggml's CPU silu does on a row (16-lane vectors, then a
 * scalar tail). out may be g. */
void sp_swiglu(float *out, const float *g, const float *u, int64_t n);

/* Attention kernels, with the arithmetic of llama.cpp's batched CPU
 * attention (ggml: kq by vec_dot_f32, soft_max, kqv by llamafile's tinyBLAS
 * sgemm), so that a chain's attention output has llama.cpp's bits. They
 * work on ranks r = 0..n-1: the visible slots of a token in slot order
 * (callers drop masked slots first), so a tree node's attention is the same
 * as the same token's in a chain, wherever the masked slots are.
 *   scores:  out[s] = scale * dot(q, k_s) for slots s < n (rows `stride`
 *            floats apart, hd floats used), dot as ggml's AVX-512
 *            vec_dot_f32: for the first hd/64*64 dims, accumulators
 *            a_j[l] = fma(q_i, k_i, a_j[l]) with i = 64c + 16j + l, then
 *            a_0 + a_2 and a_1 + a_3 added, those two added, and reduced by
 *            sp_reduce16; then the remaining dims in order: the first
 *            multiple of 8 of them as s += q_i k_i, the last (< 8) as
 *            s = fma(q_i, k_i, s) (what GCC made of ggml's tail loop;
 *            checked against ggml for lengths 1..200).
 *   softmax: in place over n values (none masked; -INFINITY gives 0):
 *            e_r = sp_exp_ggml(x_r - max), sum = the double sum over groups
 *            of 16 ranks of sp_reduce16 of the group (zero-padded), then
 *            x_r = e_r * (float)(1 / sum).
 *   mix:     o[i] = sp_reduce16(a) with a[l] = fma(v_r[i], p[r], a[l]) over
 *            ranks r = l mod 16 in order (tinyBLAS: 16 lanes along the
 *            slots), where rank r's value row is v + idx[r] * stride (idx
 *            NULL: v + r * stride). Ranks with p = 0 are skipped (they
 *            would add exactly 0; a non-finite masked row never reaches o).
 * Per-rank arithmetic does not depend on n, so a token's attention output is
 * the same whether it is evaluated alone or in a batch. */
typedef void (*sp_att_scores_fn)(const float *q, const float *k, int64_t stride, int32_t n,
                                 int32_t hd, float scale, float *out);
typedef void (*sp_att_mix_fn)(const float *p, const int32_t *idx, const float *v, int64_t stride,
                              int32_t n, int32_t hd, float *o);
sp_att_scores_fn sp_ops_att_scores(void);
sp_att_mix_fn sp_ops_att_mix(void);
/* The same over a typed KV cache (kv.h): llama.cpp's arithmetic with an
 * F16 or Q8_0 cache, flash attention off, for a batch of 2 or more tokens
 * (ggml converts the queries, then the probabilities, to the cache's dot
 * type and hands the products to tinyBLAS; a single token goes through
 * ggml's vec_dot kernels, whose last bits differ: not reproduced). Rows
 * are `stride` bytes apart; q is the query as sp_ops_att_query made it.
 *   F16 scores: q rounded to f16; when hd % 16 == 0, out[s] = scale *
 *            sp_reduce16(a) with a[l] = fma(k_i, q_i, a[l]) over dims
 *            i = l mod 16 in order (tinyBLAS<16> on f16); otherwise
 *            ggml's vec_dot_f16: 4 x 16 lanes over the first hd/64*64
 *            dims as in the F32 scores, summed ((a0 + a2) + (a1 + a3)),
 *            sp_reduce16 into a double, the rest added in double as float
 *            products, rounded to float.
 *   F16 mix: as the F32 mix with p_r rounded to f16 first.
 *   Q8_0 scores: q quantised as the cache's rows (kv.h); per 32-block b,
 *            8 lanes j += fma(d_k d_q, sum of the 4 int8 products
 *            4j..4j+3) in block order, added as ggml's hsum_float_8
 *            ((a_j + a_(j+4)), then (h0 + h2) + (h1 + h3)) (tinyBLAS_Q0).
 *   Q8_0 mix: as the F32 mix over the values d * q (a float product).
 *            llama.cpp needs flash attention for a quantised V cache,
 *            whose arithmetic this is not: close, not equal. */
typedef void (*sp_att_scores_kv_fn)(const void *q, const void *k, size_t stride, int32_t n,
                                    int32_t hd, float scale, float *out);
typedef void (*sp_att_mix_kv_fn)(const float *p, const int32_t *idx, const void *v, size_t stride,
                                 int32_t n, int32_t hd, float *o);
/* The mix in pieces (grouped attention walks the cache block by block for
 * many query rows): adds ranks r0..r1-1 into acc, 16 rows of acc_ld floats
 * (row l gathers the ranks r with r mod 16 == l, hd floats used), in rank
 * order; sp_att_mix_finish then gives o[i] = sp_reduce16 over the rows.
 * Zeroed acc, ranks 0..n-1 in any number of pieces, then finish: the mix's
 * bits. */
typedef void (*sp_att_mix_acc_fn)(const float *p, const int32_t *idx, const void *v, size_t stride,
                                  int32_t r0, int32_t r1, int32_t hd, float *acc, int32_t acc_ld);
sp_att_mix_acc_fn sp_ops_att_mix_acc(sp_ggml_type vtype);
void sp_att_mix_finish(const float *acc, int32_t acc_ld, int32_t hd, float *o);
/* The query q (hd floats) in the form the scores over a `ktype` cache
 * read: floats (F32), halves (F16) or q8_0 blocks (Q8_0) at dst, which
 * holds hd * 4 bytes. */
void sp_ops_att_query(sp_ggml_type ktype, const float *q, int32_t hd, void *dst);
sp_att_scores_kv_fn sp_ops_att_scores_kv(sp_ggml_type ktype);
sp_att_mix_kv_fn sp_ops_att_mix_kv(sp_ggml_type vtype);
/* The F16-cache kernels over rows widened once (grouped attention widens a
 * few cache rows for all the query rows reading them, instead of every row
 * widening them again), with the same bits as the F16 kernels on the
 * unwidened rows: widen converts n rows of w halves (`stride` bytes apart)
 * to floats, dst rows w apart; scores_wide is the F16 scores' tinyBLAS
 * order (hd % 16 == 0) over the widened query q (hd floats, the f16 query
 * widened) and widened key rows k (hd floats apart); mix_wide is the F16
 * mix (p rounded to f16) over widened value rows (w floats apart, hd = w
 * used). */
typedef void (*sp_att_widen_fn)(const void *src, size_t stride, int32_t n, int32_t w, float *dst);
typedef void (*sp_att_scores_wide_fn)(const float *q, const float *k, int32_t n, int32_t hd, float scale,
                                      float *out);
sp_att_widen_fn sp_ops_att_widen(void);
sp_att_scores_wide_fn sp_ops_att_scores_wide(void);
sp_att_mix_acc_fn sp_ops_att_mix_acc_wide(void);
/* The F16-cache kernels for a group of query rows that read the same cache
 * rows (the query heads of one KV head for one token), each cache element
 * converted once for all of them: row j's bits are the F16 kernels' on its
 * own; hd % 16 == 0 for both.
 *   scores_grp: row j's query (as sp_ops_att_query made it) at
 *            q + j * q_stride bytes, its n scores at out + j * out_ld.
 *   mix_grp: sp_att_mix_acc_fn of row j (probabilities p + j * p_ld,
 *            accumulators acc + j * acc_stride floats) over ranks r0..r1-1
 *            that are slots (no rank map), hd % 16 == 0. */
typedef void (*sp_att_scores_grp_fn)(const void *q, size_t q_stride, int32_t rows, const void *k, size_t stride,
                                     int32_t n, int32_t hd, float scale, float *out, size_t out_ld);
typedef void (*sp_att_mix_grp_fn)(const float *p, size_t p_ld, int32_t rows, const void *v, size_t stride,
                                  int32_t r0, int32_t r1, int32_t hd, float *acc, size_t acc_stride, int32_t ld);
/* NULL where the active ISA has none (attention then reads row by row or
 * widened: the same bits) */
sp_att_scores_grp_fn sp_ops_att_scores_grp(void);
sp_att_mix_grp_fn sp_ops_att_mix_grp(void);
/* 16 floats summed in the order of GCC's _mm512_reduce_add_ps (ggml's
 * horizontal sum): halves h_i = a_i + a_(i+8), quarters q_i = h_i + h_(i+4),
 * then (q_0 + q_2) + (q_1 + q_3). */
static inline float sp_reduce16(const float *a) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}
/* In-place softmax of n floats for the active ISA (sp_softmax is the scalar
 * reference, the softmax above); bit-identical across ISAs. */
typedef void (*sp_softmax_fn)(float *x, int64_t n);
sp_softmax_fn sp_ops_softmax(void);
/* sp_swiglu for the active ISA (bit-identical to it). */
typedef void (*sp_swiglu_fn)(float *out, const float *g, const float *u, int64_t n);
sp_swiglu_fn sp_ops_swiglu(void);

/* ---- Per-ISA kernel tables (filled by ops_*.c). ---- */
typedef struct sp_ops_table {
    sp_mm_kernel mm[SP_GGML_TYPE_COUNT];
    sp_mm_kernel mm_packed[SP_GGML_TYPE_COUNT]; /* over packed weights; NULL: none */
    sp_mm_kernel mm_f16_vecdot;  /* sp_ops_mm_f16_vecdot; NULL: the scalar one */
    sp_att_scores_fn att_scores; /* NULL: the scalar one */
    sp_softmax_fn softmax;       /* NULL: sp_softmax */
    /* over F16 / Q8_0 caches (index 0: F16, 1: Q8_0); NULL: scalar ones */
    sp_att_scores_kv_fn att_scores_kv[2];
    /* the mix, accumulating (index 0: F32, 1: F16, 2: Q8_0); NULL: scalar */
    sp_att_mix_acc_fn att_mix_acc[3];
    /* the widened F16 kernels (sp_ops_att_widen...); NULL: scalar ones */
    sp_att_widen_fn att_widen;
    sp_att_scores_wide_fn att_scores_wide;
    sp_att_mix_acc_fn att_mix_acc_wide;
    /* the grouped F16 kernels (sp_ops_att_scores_grp...); NULL: none */
    sp_att_scores_grp_fn att_scores_grp;
    sp_att_mix_grp_fn att_mix_grp;
    /* sp_swiglu for the ISA, bit-identical to it. NULL: sp_swiglu */
    sp_swiglu_fn swiglu;
    /* q8 activation row (see sp_ops_act_prepare); must be bit-identical to
     * the scalar one. NULL: the scalar one. */
    void (*act_q8)(const float *x, int64_t k, void *dst);
    /* q8_K activation row (any input); bit-identical to the scalar one.
     * NULL: the scalar one. */
    void (*act_q8k)(const float *x, int64_t k, void *dst);
    /* Streaming read of `bytes` (a multiple of 256, 64-byte aligned) with the
     * widest loads of the ISA, returning a checksum that keeps the loads
     * alive (the bandwidth probe of sp_sysinfo). NULL: the scalar one. */
    uint64_t (*read_sum)(const void *p, size_t bytes);
} sp_ops_table;

/* The active ISA's streaming read (see sp_ops_table.read_sum). */
uint64_t sp_ops_read_sum(const void *p, size_t bytes);

void sp_ops_fill_scalar(sp_ops_table *t);
void sp_ops_fill_avx2(sp_ops_table *t);
void sp_ops_fill_avx512(sp_ops_table *t);
/* The AVX2 K-quant kernels (ops_avx2.c), used by the AVX2 and AVX-512 tables. */
void sp_ops_fill_kquants_avx2(sp_ops_table *t);

/* q8 activation row accessors. */
static inline const int8_t *sp_act_qs(const void *row) { return (const int8_t *)row; }
static inline const float *sp_act_d(const void *row, int64_t k) {
    return (const float *)((const uint8_t *)row + k);
}
static inline const int32_t *sp_act_sum(const void *row, int64_t k) {
    return (const int32_t *)((const uint8_t *)row + k + 4 * (k / 32));
}
static inline const float *sp_act_s(const void *row, int64_t k) {
    return (const float *)((const uint8_t *)row + k + 8 * (k / 32));
}
/* q8_K accessors. */
static inline const float *sp_actk_d(const void *row, int64_t k) {
    return (const float *)((const uint8_t *)row + k);
}
static inline const int32_t *sp_actk_bsum(const void *row, int64_t k) {
    return (const int32_t *)((const uint8_t *)row + k + 4 * (k / 256));
}


/* Q4_K's, Q5_K's and IQ4_XS's 32-element pair sums (see the top), after the q8_K layout. */
static inline int64_t sp_actk_base_bytes(int64_t k) {
    return (k + 4 * (k / 256) + 4 * (k / 16) + 63) & ~(int64_t)63;
}
static inline int32_t *sp_actk_pairs(const void *row, int64_t k) {
    return (int32_t *)((uintptr_t)row + (uintptr_t)sp_actk_base_bytes(k));
}

/* Q2_K's 16-sum pairs (see the top), after the q8_K layout. */
static inline int32_t *sp_actk_pairs16(const void *row, int64_t k) {
    return (int32_t *)((uintptr_t)row + (uintptr_t)sp_actk_base_bytes(k));
}

/* Q6_K's and Q3_K's activation bytes plus 128 (see the top), after the q8_K layout. */
static inline uint8_t *sp_actk_u8(const void *row, int64_t k) {
    return (uint8_t *)((uintptr_t)row + (uintptr_t)sp_actk_base_bytes(k));
}

/* Q4_0/Q8_0 group-of-4 extension of the q8 activation row (see the top). */
static inline int64_t sp_act_g4_off(int64_t k) { return ((k + 12 * (k / 32)) + 63) & ~(int64_t)63; }
static inline int64_t sp_act_g4_bytes(int64_t k) { return 256 * ((k / 32 + 3) / 4); }
static inline int8_t *sp_act_g4_qs(const void *row, int64_t k) {
    return (int8_t *)((uintptr_t)row + (uintptr_t)sp_act_g4_off(k));
}
static inline float *sp_act_g4_d(const void *row, int64_t k) {
    return (float *)((uintptr_t)row + (uintptr_t)(sp_act_g4_off(k) + 128 * ((k / 32 + 3) / 4)));
}
static inline int32_t *sp_act_g4_corr(const void *row, int64_t k) {
    return (int32_t *)((uintptr_t)row + (uintptr_t)(sp_act_g4_off(k) + 192 * ((k / 32 + 3) / 4)));
}
/* Whole per-block corrections of Q4_0/Q8_0 rows (after the g4 extension). */
static inline int64_t sp_act_corr_bytes(int64_t k) { return (4 * (k / 32) + 63) & ~(int64_t)63; }
static inline int32_t *sp_act_corr(const void *row, int64_t k) {
    return (int32_t *)((uintptr_t)row + (uintptr_t)(sp_act_g4_off(k) + sp_act_g4_bytes(k)));
}

#endif
