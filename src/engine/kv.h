/* sp_kv: the key/value cache of one sequence.
 *
 * Per layer, K and V rows of kv_dim = n_kv_heads * head_dim values, one row
 * per cached token, slots 0..n-1 in the order tokens were evaluated. K rows
 * are stored after RoPE. With SP_KV_K_BY_HEAD the K storage of a layer is
 * head-major instead (each KV head's rows of head_dim values contiguous, slot
 * after slot), so that attention streams one head's keys from consecutive
 * bytes (with slot-major rows a head's keys are a short piece of every row,
 * a page apart after a few slots: hardware prefetchers stop at pages). Each of K and V has its own element type: F32,
 * F16 (round to nearest even, as ggml's CPU conversion) or Q8_0 (blocks of
 * 32 quantised as ggml's CPU quantize_row_q8_0: id = 127 / amax, round to
 * nearest even, d = f16(amax / 127); a head must be a whole number of
 * blocks). Storage grows in chunks up to the capacity n_ctx as tokens
 * arrive (sp_kv_reserve), so a long context costs memory only when used.
 * Speculation needs two edits besides appending: truncate (roll back
 * rejected draft tokens) and keep (after a tree pass, keep only the
 * accepted path's entries, moved to be contiguous). */
#ifndef SP_KV_H
#define SP_KV_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "sp_status.h"

typedef struct sp_kv {
    int32_t n_layers;
    int32_t kv_dim, head_dim;
    int32_t n_ctx;   /* capacity in tokens */
    int32_t n_alloc; /* slots allocated per layer (<= n_ctx) */
    int32_t n;       /* tokens cached */
    sp_ggml_type type_k, type_v;
    size_t k_row, v_row; /* bytes of one row */
    size_t k_hrow;       /* bytes of one head's K row */
    int k_by_head;       /* K storage head-major (SP_KV_K_BY_HEAD) */
    /* Walsh-Hadamard rotation (ops.h sp_fwht) of K rows (and queries) and
     * of V rows (and the attention output) in runs of this many values, 0
     * for none: as llama.cpp, for a quantised type when head_dim % 64 ==
     * 0, K by the largest power of 2 dividing head_dim, V by 64 */
    int32_t rot_k, rot_v;
    uint8_t **k;     /* [n_layers] -> [n_alloc][k_row], or [heads][n_alloc][k_hrow] by head */
    uint8_t **v;     /* [n_layers] -> [n_alloc][v_row] */
} sp_kv;

/* True for the element types a cache can hold (F32, F16, Q8_0). */
int sp_kv_type_ok(sp_ggml_type t);
/* Bytes of a cache of n_ctx tokens (both K and V, every layer). */
uint64_t sp_kv_bytes(sp_ggml_type type_k, sp_ggml_type type_v, int32_t n_layers, int32_t kv_dim,
                     int32_t n_ctx);

/* sp_kv_init flags */
#define SP_KV_K_BY_HEAD 1u

/* A cache of capacity n_ctx; head_dim is checked against Q8_0's blocks.
 * Allocates min(n_ctx, 256) slots now; sp_kv_reserve grows it. flags: 0 or
 * SP_KV_K_BY_HEAD. */
sp_status sp_kv_init(sp_kv *kv, int32_t n_layers, int32_t kv_dim, int32_t head_dim, int32_t n_ctx,
                     sp_ggml_type type_k, sp_ggml_type type_v, unsigned flags, sp_error *err);
void sp_kv_free(sp_kv *kv);

/* Makes slots [0, n) addressable (n <= n_ctx), growing the storage (at
 * least doubling, to a multiple of 256 slots) and keeping its contents.
 * SP_ERR_NOMEM when memory runs out (the cache is unchanged then). */
sp_status sp_kv_reserve(sp_kv *kv, int32_t n, sp_error *err);

/* A slot's K row (slot-major storage only). */
static inline uint8_t *sp_kv_k(const sp_kv *kv, int32_t layer, int32_t slot) {
    return kv->k[layer] + (size_t)slot * kv->k_row;
}
/* KV head h's K row at a slot, either storage; the head's next slot is
 * sp_kv_k_stride bytes on. */
static inline uint8_t *sp_kv_kh(const sp_kv *kv, int32_t layer, int32_t h, int32_t slot) {
    return kv->k_by_head ? kv->k[layer] + ((size_t)h * (size_t)kv->n_alloc + (size_t)slot) * kv->k_hrow
                         : kv->k[layer] + (size_t)slot * kv->k_row + (size_t)h * kv->k_hrow;
}
static inline size_t sp_kv_k_stride(const sp_kv *kv) { return kv->k_by_head ? kv->k_hrow : kv->k_row; }
static inline uint8_t *sp_kv_v(const sp_kv *kv, int32_t layer, int32_t slot) {
    return kv->v[layer] + (size_t)slot * kv->v_row;
}

/* Writes n rows of kv_dim floats (k and v, `stride` floats apart) into
 * slots slot..slot+n-1 of a layer, converted to the cache's types. */
void sp_kv_store(sp_kv *kv, int32_t layer, int32_t slot, const float *k, const float *v,
                 int64_t stride, int32_t n);

/* Converts a row of n floats (n a multiple of 32 for Q8_0) to type t as
 * the cache stores it (F32, F16 or Q8_0). */
void sp_kv_convert_row(sp_ggml_type t, const float *x, void *dst, int64_t n);

/* Drop every slot >= n (n <= current length). */
sp_status sp_kv_truncate(sp_kv *kv, int32_t n, sp_error *err);

/* Keep slots start + idx[0..m-1] (strictly increasing, all < kv->n) and move
 * them to start..start+m-1; the cache then holds start + m tokens. */
sp_status sp_kv_keep(sp_kv *kv, int32_t start, const int32_t *idx, int32_t m, sp_error *err);

#endif
