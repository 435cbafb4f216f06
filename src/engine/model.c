/* model: inference contexts and the forward pass over a batch of tokens
 * (chains or trees) with a KV cache. Arithmetic only: loading lives in
 * model_load.c, kernels in ops*.c. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "threadpool.h"
#include "ops.h"
#include "quant.h"

/* Below this many multiply-adds a job runs on the calling thread: waking
 * workers costs more than it saves (all of stories260K falls here). */
#define PAR_MIN_WORK (1 << 17)

struct sp_ctx {
    const sp_model *m;
    sp_kv kv;
    int32_t max_batch;
    sp_pool *pool;
    bool owns_pool;
    bool *skip;           /* [n_layers] or NULL */
    /* scratch, sized at init for max_batch rows */
    float *x;             /* [B][dim] residual stream */
    float *xb;            /* [B][max(dim, q_dim)] normed input / attention output */
    float *q;             /* [B][q_dim] */
    float *hb, *hb2;      /* [B][ffn] */
    float *x2;            /* [B][dim] attention / FFN block outputs */
    float *kb, *vb;       /* [B][kv_dim] new keys/values of a multi-sequence forward,
                           * copied into each sequence's cache */
    uint8_t *act;         /* [3][B][act_stride] prepared activations, one slot per
                           * matmul of a job (a mixed file's wq/wk/wv may differ in type) */
    size_t act_stride;
    float *att;           /* [nth][n_ctx] attention scores per thread */
    int32_t *att_idx;     /* [nth][n_ctx] their visible slots (ops.h: ranks) */
    int32_t *pos;         /* [B] */
    sp_rope_freqs rope;   /* RoPE angles (ops.h) */
    float *rope_cs;       /* [B][rot_dim] cos/sin per new token */
    sp_rope_freqs rope_local; /* the same for rope_local layers (gemma3) */
    float *rope_cs_local;     /* [B][rot_dim] for them, or NULL */
};

sp_ctx_params sp_ctx_default_params(void) {
    sp_ctx_params p = {.n_ctx = 0, .max_batch = SP_CTX_DEFAULT_BATCH, .n_threads = 1, .pool = NULL};
    return p;
}

const sp_model *sp_ctx_model(const sp_ctx *c) { return c->m; }
int32_t sp_ctx_n_ctx(const sp_ctx *c) { return c->kv.n_ctx; }
int32_t sp_ctx_max_batch(const sp_ctx *c) { return c->max_batch; }
int32_t sp_ctx_n_past(const sp_ctx *c) { return c->kv.n; }
sp_kv *sp_ctx_kv(sp_ctx *c) { return &c->kv; }
sp_pool *sp_ctx_pool(sp_ctx *c) { return c->pool; }

sp_status sp_ctx_truncate(sp_ctx *c, int32_t n, sp_error *err) { return sp_kv_truncate(&c->kv, n, err); }

sp_status sp_ctx_keep(sp_ctx *c, int32_t start, const int32_t *idx, int32_t m, sp_error *err) {
    return sp_kv_keep(&c->kv, start, idx, m, err);
}

sp_status sp_ctx_set_skip_layers(sp_ctx *c, const bool *skip, sp_error *err) {
    if (!skip) {
        free(c->skip);
        c->skip = NULL;
        return SP_OK;
    }
    int32_t kept = 0;
    for (int32_t l = 0; l < c->m->cfg.n_layers; l++) kept += !skip[l];
    if (kept == 0) return sp_fail(err, SP_ERR_ARG, "cannot skip every layer");
    if (!c->skip) c->skip = malloc((size_t)c->m->cfg.n_layers * sizeof *c->skip);
    if (!c->skip) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    memcpy(c->skip, skip, (size_t)c->m->cfg.n_layers * sizeof *c->skip);
    return SP_OK;
}

void sp_ctx_free(sp_ctx *c) {
    if (!c) return;
    sp_kv_free(&c->kv);
    if (c->owns_pool) sp_pool_free(c->pool);
    free(c->skip);
    free(c->x);
    free(c->xb);
    free(c->q);
    free(c->kb);
    free(c->vb);
    free(c->hb);
    free(c->hb2);
    free(c->x2);
    free(c->act);
    free(c->att);
    free(c->att_idx);
    free(c->pos);
    free(c->rope_cs);
    free(c->rope_cs_local);
    free(c);
}

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

sp_status sp_ctx_init(const sp_model *m, const sp_ctx_params *p, sp_ctx **out, sp_error *err) {
    *out = NULL;
    sp_status ist = sp_ops_init(err);
    if (ist) return ist;
    sp_ctx_params d = sp_ctx_default_params();
    if (!p) p = &d;
    const sp_model_config *cfg = &m->cfg;
    int32_t n_ctx = p->n_ctx;
    /* Default: the training context, at least 512 (some converters write a
     * small placeholder, e.g. 128 for stories260K) and at most 4096. */
    if (n_ctx == 0) n_ctx = cfg->n_ctx_train < 512 ? 512 : cfg->n_ctx_train > 4096 ? 4096 : cfg->n_ctx_train;
    if (n_ctx < 1 || n_ctx > (1 << 20))
        return sp_fail(err, SP_ERR_ARG, "context size must be in [1, 1048576], got %d", n_ctx);
    if (p->max_batch < 1 || p->max_batch > 4096)
        return sp_fail(err, SP_ERR_ARG, "max batch must be in [1, 4096], got %d", p->max_batch);
    sp_ctx *c = calloc(1, sizeof *c);
    if (!c) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    c->m = m;
    c->max_batch = p->max_batch;
    sp_status st = SP_OK;
    if (p->pool) {
        c->pool = p->pool;
    } else {
        st = sp_pool_init(p->n_threads, &c->pool, err);
        c->owns_pool = true;
    }
    if (!st) st = sp_kv_init(&c->kv, cfg->n_layers, cfg->n_kv_heads * cfg->head_dim, n_ctx, err);
    if (st) {
        sp_ctx_free(c);
        return st;
    }
    const size_t B = (size_t)p->max_batch;
    const int64_t q_dim = (int64_t)cfg->n_heads * cfg->head_dim;
    const int64_t wide = q_dim > cfg->dim ? q_dim : cfg->dim;
    int64_t maxk = wide > cfg->ffn_dim ? wide : cfg->ffn_dim;
    /* act rows must fit the widest input of any matrix type present */
    c->act_stride = 0;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++)
        if (sp_quant_loadable((sp_ggml_type)t) && sp_ops_act_bytes((sp_ggml_type)t, maxk) > c->act_stride)
            c->act_stride = sp_ops_act_bytes((sp_ggml_type)t, maxk);
    int nth = sp_pool_n_threads(c->pool);
    c->x = alloc64(B * (size_t)cfg->dim * 4);
    c->xb = alloc64(B * (size_t)wide * 4);
    c->q = alloc64(B * (size_t)q_dim * 4);
    c->hb = alloc64(B * (size_t)cfg->ffn_dim * 4);
    c->hb2 = alloc64(B * (size_t)cfg->ffn_dim * 4);
    c->x2 = alloc64(B * (size_t)cfg->dim * 4);
    c->kb = alloc64(B * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim * 4);
    c->vb = alloc64(B * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim * 4);
    c->act = alloc64(3 * B * c->act_stride);
    c->att = alloc64((size_t)nth * (size_t)n_ctx * 4);
    c->att_idx = malloc((size_t)nth * (size_t)n_ctx * sizeof(int32_t));
    c->pos = malloc(B * sizeof(int32_t));
    c->rope_cs = malloc(B * (size_t)cfg->rot_dim * sizeof(float));
    /* phi3's long factors beyond its original context, as llama.cpp chooses them */
    const float *factors = m->rope_factors ? m->rope_factors
                           : n_ctx > m->n_ctx_orig && m->rope_long ? m->rope_long : m->rope_short;
    c->rope = (sp_rope_freqs){.theta_scale = powf(cfg->rope_theta, -2.0f / (float)cfg->rot_dim),
                              .freq_scale = cfg->rope_scale, .factors = factors};
    if (m->rope_theta_local > 0) {
        c->rope_cs_local = malloc(B * (size_t)cfg->rot_dim * sizeof(float));
        c->rope_local = (sp_rope_freqs){.theta_scale = powf(m->rope_theta_local, -2.0f / (float)cfg->rot_dim),
                                        .freq_scale = m->rope_scale_local > 0 ? m->rope_scale_local : 1.0f};
        if (!c->rope_cs_local) {
            sp_ctx_free(c);
            return sp_fail(err, SP_ERR_NOMEM, "out of memory for context scratch");
        }
    }
    if (!c->x || !c->xb || !c->q || !c->kb || !c->vb || !c->hb || !c->hb2 || !c->x2 || !c->act || !c->att ||
        !c->att_idx || !c->pos || !c->rope_cs) {
        sp_ctx_free(c);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for context scratch");
    }
    *out = c;
    return SP_OK;
}

/* ------------------------------------------------------------------ jobs */

/* Up to three matmuls sharing one input, run as one parallel job. Rows are
 * cut into chunks (a multiple of 4 rows, about CHUNK_BYTES of weights, but
 * at least MIN_CHUNKS_PER_THREAD chunks per thread) that threads claim from
 * a shared counter, so a thread that is descheduled or slower (another
 * process on the core) does not hold the others up for half the job. Which
 * thread computes a row does not change its value. Each chunk is a new
 * memory stream the prefetchers must pick up: on synth-1b, 2 threads, decode
 * reached 74% (F16), 70% (Q8_0), 63% (Q4_0), 57% (Q4_K) of the read bound
 * with 64 KiB chunks and 89%, 88%, 76%, 61% with 1 MiB (4 chunks per
 * thread at least; 2 per thread measured within noise). */
#ifndef CHUNK_BYTES
#define CHUNK_BYTES (1 << 20)
#endif
#ifndef MIN_CHUNKS_PER_THREAD
#define MIN_CHUNKS_PER_THREAD 4
#endif

typedef struct mm_job {
    sp_mm mm[3];
    sp_mm_kernel fn[3];
    const float *src[3];   /* unprepared input of each matmul */
    int64_t rows[3];
    size_t row_bytes[3];   /* bytes of one weight row */
    int64_t row_align[3];  /* chunks start at multiples of this (16: packed groups) */
    int64_t chunk_rows[3]; /* rows per chunk */
    int64_t chunk_end[3];  /* cumulative chunk counts */
    const sp_weight *w[3]; /* for the scale and bias applied after the matmul */
    int n_mm;
    _Atomic int64_t next;  /* next unclaimed chunk */
} mm_job;

static void mm_job_run(void *arg, int ith, int nth) {
    mm_job *j = arg;
    (void)ith;
    if (nth == 1) {
        for (int i = 0; i < j->n_mm; i++) j->fn[i](&j->mm[i], 0, j->rows[i]);
        return;
    }
    const int64_t total = j->chunk_end[j->n_mm - 1];
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) return;
        int i = 0;
        while (c >= j->chunk_end[i]) i++;
        int64_t first = c - (i ? j->chunk_end[i - 1] : 0);
        int64_t r0 = first * j->chunk_rows[i], r1 = r0 + j->chunk_rows[i];
        j->fn[i](&j->mm[i], r0, r1 < j->rows[i] ? r1 : j->rows[i]);
    }
}

/* Prepared activation rows of `src` (n rows of k floats, src_stride floats
 * apart) for weight type t: f32-family weights read src directly; quantised
 * ones read activation slot `slot` of c->act, filled here. */
static const void *activations(sp_ctx *c, int slot, sp_ggml_type t, const float *src,
                               int64_t src_stride, int64_t k, int32_t n, size_t *stride) {
    if (t == SP_GGML_F16 || t == SP_GGML_BF16) {
        /* ggml converts the activations to the weights' type first (its
         * vec_dot_type), then sums their products in f32: rounded here */
        float *act = (float *)(c->act + (size_t)slot * (size_t)c->max_batch * c->act_stride);
        for (int32_t i = 0; i < n; i++)
            for (int64_t e = 0; e < k; e++) {
                const float x = src[i * src_stride + e];
                act[(size_t)i * (c->act_stride / sizeof(float)) + e] =
                    t == SP_GGML_F16 ? sp_fp16_to_fp32(sp_fp32_to_fp16(x)) : sp_bf16_to_fp32(sp_fp32_to_bf16(x));
            }
        *stride = c->act_stride;
        return act;
    }
    if (!sp_ops_act_is_q8(t)) {
        *stride = (size_t)src_stride * sizeof(float);
        return src;
    }
    uint8_t *act = c->act + (size_t)slot * (size_t)c->max_batch * c->act_stride;
    for (int32_t i = 0; i < n; i++)
        sp_ops_act_prepare(t, src + i * src_stride, k, act + (size_t)i * c->act_stride);
    *stride = c->act_stride;
    return act;
}

/* Adds y = W x to job j (x: n rows of w->cols floats, x_stride floats apart). */
static void job_add(sp_ctx *c, mm_job *j, const sp_weight *w, const float *x, int64_t x_stride,
                    int32_t n, float *y, int64_t ld_y) {
    int i = j->n_mm++;
    SP_ASSERT(i < 3);
    size_t stride;
    const void *a;
    if (i > 0 && j->src[i - 1] == x && j->mm[i - 1].wtype == w->type && j->mm[i - 1].k == w->cols &&
        j->mm[i - 1].n == n) {
        /* same input as the previous matmul (wq/wk/wv, w1/w3): already prepared */
        a = j->mm[i - 1].x;
        stride = j->mm[i - 1].x_stride;
    } else {
        a = activations(c, i, w->type, x, x_stride, w->cols, n, &stride);
    }
    j->src[i] = x;
    j->w[i] = w;
    /* the packed copy where the ISA in use has a kernel for it (the same
     * kernel whatever n, so a token's logits do not depend on the batch) */
    sp_mm_kernel pk = w->packed ? sp_ops_mm_packed(w->type) : NULL;
    j->mm[i] = (sp_mm){.wtype = w->type, .w = pk ? w->packed : w->data,
                       .w_stride = pk ? w->packed_stride : w->row_bytes, .k = w->cols,
                       .x = a, .x_stride = stride, .n = n, .y = y, .ld_y = ld_y};
    j->fn[i] = pk ? pk : sp_ops_mm(w->type);
    j->row_bytes[i] = w->row_bytes;
    j->row_align[i] = pk ? SP_PACK_ROWS : 4;
    j->rows[i] = w->rows;
    SP_ASSERT(j->fn[i] != NULL);
}

/* The scale and bias of each matmul of j whose weight has them (sp_weight). */
static void job_affine(const mm_job *j) {
    for (int i = 0; i < j->n_mm; i++) {
        const sp_weight *w = j->w[i];
        if (!w->scale && !w->bias) continue;
        const float s = w->scale ? w->scale[0] : 1.0f;
        const int64_t rows = j->rows[i];
        for (int32_t t = 0; t < j->mm[i].n; t++) {
            float *y = j->mm[i].y + (int64_t)t * j->mm[i].ld_y;
            if (!w->bias)
                for (int64_t r = 0; r < rows; r++) y[r] *= s;
            else if (!w->scale)
                for (int64_t r = 0; r < rows; r++) y[r] += w->bias[r];
            else if (w->bias_first)
                for (int64_t r = 0; r < rows; r++) y[r] = (y[r] + w->bias[r]) * s;
            else
                for (int64_t r = 0; r < rows; r++) y[r] = y[r] * s + w->bias[r];
        }
    }
}

static void job_run(sp_ctx *c, mm_job *j) {
    uint64_t work = 0;
    for (int i = 0; i < j->n_mm; i++) work += (uint64_t)j->rows[i] * (uint64_t)j->mm[i].k * (uint64_t)j->mm[i].n;
    if (work < PAR_MIN_WORK || sp_pool_n_threads(c->pool) == 1) {
        mm_job_run(j, 0, 1);
        return;
    }
    const int64_t nth = sp_pool_n_threads(c->pool);
    int64_t end = 0;
    for (int i = 0; i < j->n_mm; i++) {
        /* about CHUNK_BYTES per chunk, but at least MIN_CHUNKS_PER_THREAD per thread */
        int64_t cr = (int64_t)(CHUNK_BYTES / (j->row_bytes[i] ? j->row_bytes[i] : 1));
        int64_t cap = j->rows[i] / (MIN_CHUNKS_PER_THREAD * nth);
        const int64_t al = j->row_align[i];
        if (cr > cap) cr = cap;
        cr = cr < al ? al : cr / al * al;
        j->chunk_rows[i] = cr;
        end += (j->rows[i] + cr - 1) / cr;
        j->chunk_end[i] = end;
    }
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    sp_pool_run(c->pool, mm_job_run, j);
}

static void job_exec(sp_ctx *c, mm_job *j) {
    job_run(c, j);
    job_affine(j);
}

/* Attention of the n new tokens (queries in c->q) over the cache. */
typedef struct att_job {
    sp_ctx *c;          /* the sequence's context: its cache and score scratch */
    const float *q;     /* [n][q_dim] queries of its new tokens */
    const int32_t *pos; /* [n] their positions */
    int32_t layer, n, n_past;
    int32_t mask_base, mask_w; /* mask covers slots [mask_base, n_past + n) */
    const uint8_t *mask;
    int32_t window; /* > 0: sliding window of this layer */
    float softcap;  /* > 0: scores -> cap * tanh(score / cap) */
    float *out; /* [n][q_dim], stride out_stride floats */
    int64_t out_stride;
} att_job;

static inline bool visible(const att_job *a, int32_t t, int32_t slot) {
    if (slot < a->mask_base) return true;
    if (!a->mask) return slot - a->n_past <= t;
    return a->mask[(int64_t)t * a->mask_w + (slot - a->mask_base)] != 0;
}

static void att_job_run(void *arg, int ith, int nth) {
    const att_job *a = arg;
    const sp_ctx *c = a->c;
    const sp_model_config *cfg = &c->m->cfg;
    const int32_t hd = cfg->head_dim, H = cfg->n_heads, group = cfg->n_heads / cfg->n_kv_heads;
    const int64_t q_dim = (int64_t)H * hd;
    const float scale = c->m->q_prescale ? 1.0f
                        : c->m->kq_scale > 0 ? c->m->kq_scale : 1.0f / sqrtf((float)hd); /* see attention_block */
    float *att = c->att + (size_t)ith * (size_t)c->kv.n_ctx;
    const int64_t tasks = (int64_t)a->n * H;
    const int32_t end = a->n_past + a->n;
    const sp_att_scores_fn scores = sp_ops_att_scores();
    const sp_att_mix_fn mix = sp_ops_att_mix();
    const sp_softmax_fn softmax = sp_ops_softmax();
    /* head-major: a head's tokens follow each other, so its K and V rows
     * (a few tens of KiB) are read from memory once and from L2 for the
     * other tokens, rather than the whole layer's cache once per token */
    for (int64_t task = tasks * ith / nth; task < tasks * (ith + 1) / nth; task++) {
        int32_t h = (int32_t)(task / a->n), t = (int32_t)(task % a->n);
        const float *q = a->q + t * q_dim + (int64_t)h * hd;
        const int64_t koff = (int64_t)(h / group) * hd;
        /* causal: slots after the token's own are never seen */
        const int32_t ns = a->mask ? end : a->n_past + t + 1;
        scores(q, sp_kv_k(&c->kv, a->layer, 0) + koff, c->kv.kv_dim, ns, hd, scale, att);
        if (a->softcap > 0) /* as ggml: scale by 1/cap, tanh, scale by cap (before masking) */
            for (int32_t s = 0; s < ns; s++) att[s] = tanhf(att[s] * (1.0f / a->softcap)) * a->softcap;
        /* sliding window: the slots before it get -inf in place (weight
         * exactly 0; they keep their lanes, as in ggml, where the mask does
         * this); slots below mask_base / n_past hold positions equal to
         * their index, newer slots the positions of this batch */
        if (a->window > 0) {
            const int32_t lo = a->pos[t] - a->window + 1;
            for (int32_t s = 0; s < ns; s++)
                if ((s < a->n_past ? s : a->pos[s - a->n_past]) < lo) att[s] = -INFINITY;
        }
        /* a tree mask: the slots it lets the token see, in slot order,
         * become ranks 0..nv-1 (ops.h): for a tree node, its positions */
        int32_t nv = ns, *idx = NULL;
        if (a->mask) {
            idx = c->att_idx + (size_t)ith * (size_t)c->kv.n_ctx;
            nv = 0;
            for (int32_t s = 0; s < ns; s++)
                if (visible(a, t, s)) {
                    idx[nv] = s;
                    att[nv++] = att[s];
                }
        }
        softmax(att, nv);
        mix(att, idx, sp_kv_v(&c->kv, a->layer, 0) + koff, c->kv.kv_dim, nv, hd,
            a->out + t * a->out_stride + (int64_t)h * hd);
    }
}

/* One sequence of a forward: its context (cache), batch and rows. */
typedef struct seq_rows {
    sp_ctx *c;
    const sp_batch *b;
    int32_t row0, n;       /* its rows in the lead context's scratch */
    int32_t n_past, mask_base;
} seq_rows;

/* One layer's attention block for the new tokens of every sequence (rows
 * of the lead context's scratch, sequence after sequence): norm, q/k/v
 * (one matmul each over all rows; keys and values go straight into the
 * cache for one sequence, else through kb/vb into each sequence's cache),
 * biases and per-head norms where the architecture has them, RoPE,
 * attention of each sequence over its own cache under its batch's mask and
 * the sliding window, the output projection, and the residual add. */
static void attention_block(sp_ctx *c, const seq_rows *sq, int n_seq, int32_t l, int32_t n) {
    const sp_model_config *cfg = &c->m->cfg;
    const sp_layer *L = &c->m->layers[l];
    const int64_t dim = cfg->dim, hd = cfg->head_dim, q_dim = (int64_t)cfg->n_heads * hd;
    const int64_t kv_dim = (int64_t)cfg->n_kv_heads * hd, wide = q_dim > dim ? q_dim : dim;
    const bool one = n_seq == 1;
    float *kd = one ? sp_kv_k(&sq[0].c->kv, l, sq[0].n_past) : c->kb;
    float *vd = one ? sp_kv_v(&sq[0].c->kv, l, sq[0].n_past) : c->vb;
    for (int32_t t = 0; t < n; t++)
        sp_rmsnorm(c->xb + t * wide, c->x + t * dim, L->attn_norm, dim, cfg->norm_eps);
    mm_job j = {0};
    job_add(c, &j, &L->wq, c->xb, wide, n, c->q, q_dim);
    job_add(c, &j, &L->wk, c->xb, wide, n, kd, kv_dim);
    job_add(c, &j, &L->wv, c->xb, wide, n, vd, kv_dim);
    job_exec(c, &j);
    if (L->q_norm) /* qwen3: RMSNorm of each query and key head before RoPE */
        for (int32_t t = 0; t < n; t++) {
            float *q = c->q + t * q_dim, *k = kd + t * kv_dim;
            for (int32_t h = 0; h < cfg->n_heads; h++)
                sp_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, cfg->norm_eps);
            for (int32_t h = 0; h < cfg->n_kv_heads; h++)
                sp_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, cfg->norm_eps);
        }
    const float *cs_table = L->rope_local ? c->rope_cs_local : c->rope_cs;
    for (int32_t t = 0; t < n; t++) {
        const float *cs = cs_table + (int64_t)t * cfg->rot_dim;
        sp_rope_apply(c->q + t * q_dim, cfg->n_heads, (int32_t)hd, cfg->rot_dim, cs, cfg->rope_neox);
        sp_rope_apply(kd + t * kv_dim, cfg->n_kv_heads, (int32_t)hd, cfg->rot_dim, cs, cfg->rope_neox);
    }
    if (c->m->q_prescale) { /* phi3, gemma2: the query scale before the dot (model_internal.h) */
        const float s = c->m->kq_scale > 0 ? c->m->kq_scale : 1.0f / sqrtf((float)hd);
        for (int64_t i = 0; i < (int64_t)n * q_dim; i++) c->q[i] *= s;
    }
    if (!one)
        for (int i = 0; i < n_seq; i++) {
            const size_t bytes = (size_t)sq[i].n * (size_t)kv_dim * sizeof(float);
            memcpy(sp_kv_k(&sq[i].c->kv, l, sq[i].n_past), kd + (int64_t)sq[i].row0 * kv_dim, bytes);
            memcpy(sp_kv_v(&sq[i].c->kv, l, sq[i].n_past), vd + (int64_t)sq[i].row0 * kv_dim, bytes);
        }
    for (int i = 0; i < n_seq; i++) {
        const int32_t ns = sq[i].n, np = sq[i].n_past;
        att_job a = {.c = sq[i].c, .q = c->q + (int64_t)sq[i].row0 * q_dim, .pos = c->pos + sq[i].row0,
                     .layer = l, .n = ns, .n_past = np, .mask_base = sq[i].mask_base,
                     .mask_w = np + ns - sq[i].mask_base, .mask = sq[i].b->mask, .window = L->window,
                     .softcap = c->m->attn_softcap, .out = c->xb + (int64_t)sq[i].row0 * wide,
                     .out_stride = wide};
        /* per (token, head, slot): a dot, an exp and an axpy of head_dim,
         * several times a matmul's multiply-add per weight: split sooner */
        uint64_t att_work = (uint64_t)ns * (uint64_t)(np + ns) * (uint64_t)q_dim;
        if (att_work < PAR_MIN_WORK / 4 || sp_pool_n_threads(c->pool) == 1)
            att_job_run(&a, 0, 1);
        else
            sp_pool_run(c->pool, att_job_run, &a);
    }
    mm_job jo = {0};
    job_add(c, &jo, &L->wo, c->xb, wide, n, c->x2, dim);
    job_exec(c, &jo);
    if (L->post_attn_norm) /* gemma: the block's output is normed before the residual */
        for (int32_t t = 0; t < n; t++)
            sp_rmsnorm(c->x2 + t * dim, c->x2 + t * dim, L->post_attn_norm, dim, cfg->norm_eps);
    for (int64_t i = 0; i < n * dim; i++) c->x[i] += c->x2[i];
}

/* GELU as ggml's CPU backend computes it: the tanh approximation looked up
 * in a table indexed by the input rounded to f16, the result stored as f16
 * (inputs beyond +-10 pass through or give 0). The table's inner
 * 1 + a x x is the FMA GCC makes of it: the plain form gives another f16
 * at 1 of the 37,376 inputs in range (compared with ggml's table). */
static float gelu_ggml(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float v = sp_fp16_to_fp32(sp_fp32_to_fp16(x));
    const float g = 0.5f * v * (1.0f + tanhf(0.79788456080286535587989211986876f * v * fmaf(0.044715f * v, v, 1.0f)));
    return sp_fp16_to_fp32(sp_fp32_to_fp16(g));
}

/* One layer's feed-forward block: norm, gate and up, SwiGLU, down, residual. */
static void ffn_block(sp_ctx *c, int32_t l, int32_t n) {
    const sp_model_config *cfg = &c->m->cfg;
    const sp_layer *L = &c->m->layers[l];
    const int64_t dim = cfg->dim, q_dim = (int64_t)cfg->n_heads * cfg->head_dim;
    const int64_t ffn = cfg->ffn_dim, wide = q_dim > dim ? q_dim : dim;
    for (int32_t t = 0; t < n; t++)
        sp_rmsnorm(c->xb + t * wide, c->x + t * dim, L->ffn_norm, dim, cfg->norm_eps);
    mm_job jf = {0};
    job_add(c, &jf, &L->w1, c->xb, wide, n, c->hb, ffn);
    job_add(c, &jf, &L->w3, c->xb, wide, n, c->hb2, ffn);
    job_exec(c, &jf);
    if (c->m->geglu)
        for (int64_t i = 0; i < n * ffn; i++) c->hb[i] = gelu_ggml(c->hb[i]) * c->hb2[i];
    else
        for (int32_t t = 0; t < n; t++) /* per row, as ggml's silu (ops.h) */
            sp_ops_swiglu()(c->hb + t * ffn, c->hb + t * ffn, c->hb2 + t * ffn, ffn);
    mm_job jd = {0};
    job_add(c, &jd, &L->w2, c->hb, ffn, n, c->x2, dim);
    job_exec(c, &jd);
    if (L->post_ffn_norm)
        for (int32_t t = 0; t < n; t++)
            sp_rmsnorm(c->x2 + t * dim, c->x2 + t * dim, L->post_ffn_norm, dim, cfg->norm_eps);
    for (int64_t i = 0; i < n * dim; i++) c->x[i] += c->x2[i];
}

/* --------------------------------------------------------------- forward */

/* Checks one sequence's batch against its context (as sp_forward
 * documents) and fills its rows' positions into the lead's scratch. */
static sp_status check_seq(sp_ctx *lead, seq_rows *q, sp_error *err) {
    sp_ctx *c = q->c;
    const sp_batch *b = q->b;
    const int32_t n = b->n, n_past = c->kv.n, V = c->m->cfg.n_vocab;
    if (n < 1 || n > c->max_batch)
        return sp_fail(err, SP_ERR_ARG, "batch of %d tokens (this context takes 1 to %d)", n,
                       c->max_batch);
    if (n_past + n > c->kv.n_ctx)
        return sp_fail(err, SP_ERR_RANGE,
                       "context full: %d cached + %d new tokens exceed the context size %d",
                       n_past, n, c->kv.n_ctx);
    for (int32_t i = 0; i < n; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= V)
            return sp_fail(err, SP_ERR_ARG, "token id %d out of range [0, %d)", b->tokens[i], V);
        const int32_t p = b->pos ? b->pos[i] : n_past + i;
        if (p < 0 || p >= (1 << 24)) return sp_fail(err, SP_ERR_ARG, "position %d out of range", p);
        lead->pos[q->row0 + i] = p;
    }
    const int32_t mask_base = b->mask && b->mask_from_past ? b->mask_base : n_past;
    if (mask_base < 0 || mask_base > n_past)
        return sp_fail(err, SP_ERR_ARG, "mask base %d outside the cache (0..%d)", mask_base, n_past);
    if (b->mask) {
        /* every token must see itself, or its softmax would be empty */
        const int32_t w = n_past + n - mask_base;
        for (int32_t i = 0; i < n; i++)
            if (!b->mask[(int64_t)i * w + (n_past + i - mask_base)])
                return sp_fail(err, SP_ERR_ARG, "mask row %d does not let token %d see itself", i, i);
    }
    q->n = n;
    q->n_past = n_past;
    q->mask_base = mask_base;
    return SP_OK;
}

/* The forward of sp_forward and sp_forward_multi: every sequence's rows in
 * the lead context's scratch, the matmuls over all of them at once, the
 * attention per sequence. */
static sp_status forward_seqs(sp_ctx *c, seq_rows *sq, int n_seq, int32_t n, const bool *skip,
                              float *logits, sp_error *err) {
    const sp_model *m = c->m;
    const sp_model_config *cfg = &m->cfg;
    const int64_t dim = cfg->dim, hd = cfg->head_dim, q_dim = (int64_t)cfg->n_heads * hd;
    const int64_t wide = q_dim > dim ? q_dim : dim;

    for (int32_t t = 0; t < n; t++) {
        sp_rope_cs(c->rope_cs + (int64_t)t * cfg->rot_dim, c->pos[t], &c->rope, cfg->rot_dim);
        if (c->rope_cs_local)
            sp_rope_cs(c->rope_cs_local + (int64_t)t * cfg->rot_dim, c->pos[t], &c->rope_local, cfg->rot_dim);
    }
    for (int i = 0; i < n_seq; i++)
        for (int32_t t = 0; t < sq[i].n; t++)
            sp_dequantize_row(m->tok_embd.type,
                              m->tok_embd.data + (size_t)sq[i].b->tokens[t] * m->tok_embd.row_bytes,
                              c->x + (sq[i].row0 + t) * dim, dim);
    if (m->embed_scale > 0) /* gemma */
        for (int64_t i = 0; i < (int64_t)n * dim; i++) c->x[i] *= m->embed_scale;

    for (int32_t l = 0; l < cfg->n_layers; l++) {
        if (skip && skip[l]) continue;
        attention_block(c, sq, n_seq, l, n);
        ffn_block(c, l, n);
    }

    /* the rows that want logits, packed: all of a sequence's or its last */
    int32_t rows = 0;
    for (int i = 0; i < n_seq; i++)
        for (int32_t t = sq[i].b->logits_all ? 0 : sq[i].n - 1; t < sq[i].n; t++, rows++)
            sp_rmsnorm(c->xb + rows * wide, c->x + (sq[i].row0 + t) * dim, m->out_norm, dim, cfg->norm_eps);
    mm_job jl = {0};
    job_add(c, &jl, &m->output, c->xb, wide, rows, logits, cfg->n_vocab);
    job_exec(c, &jl);
    if (m->final_softcap > 0) /* gemma2 */
        for (int64_t i = 0; i < (int64_t)rows * cfg->n_vocab; i++)
            logits[i] = tanhf(logits[i] * (1.0f / m->final_softcap)) * m->final_softcap;
    for (int i = 0; i < n_seq; i++) sq[i].c->kv.n = sq[i].n_past + sq[i].n;
    /* NaN/inf weights or overflowing activations end here (the quantisers
     * turn them into NaN scales, never undefined conversions): refuse to
     * hand them to a sampler. The cache keeps the tokens; callers roll back. */
    for (int64_t i = 0; i < (int64_t)rows * cfg->n_vocab; i++)
        if (!isfinite(logits[i]))
            return sp_fail(err, SP_ERR_NUMERIC,
                           "the forward pass produced a non-finite logit (NaN or inf) at row %lld: "
                           "the model's weights or activations are not finite",
                           (long long)(i / cfg->n_vocab));
    return SP_OK;
}

sp_status sp_forward(sp_ctx *c, const sp_batch *b, float *logits, sp_error *err) {
    seq_rows q = {.c = c, .b = b};
    sp_status st = check_seq(c, &q, err);
    if (st) return st;
    return forward_seqs(c, &q, 1, b->n, c->skip, logits, err);
}

sp_status sp_forward_multi(sp_ctx *const *ctxs, const sp_batch *batches, int32_t n_seq,
                           float *logits, sp_error *err) {
    if (n_seq < 1 || n_seq > SP_FORWARD_MAX_SEQS)
        return sp_fail(err, SP_ERR_ARG, "%d sequences in one forward (1 to %d)", n_seq,
                       SP_FORWARD_MAX_SEQS);
    if (n_seq == 1) return sp_forward(ctxs[0], &batches[0], logits, err);
    sp_ctx *lead = ctxs[0];
    const int nth = sp_pool_n_threads(lead->pool);
    seq_rows sq[SP_FORWARD_MAX_SEQS];
    int32_t n = 0;
    for (int32_t i = 0; i < n_seq; i++) {
        sp_ctx *c = ctxs[i];
        if (c->m != lead->m)
            return sp_fail(err, SP_ERR_ARG, "sequence %d: its context is of another model", i);
        for (int32_t k = 0; k < i; k++)
            if (ctxs[k] == c) return sp_fail(err, SP_ERR_ARG, "sequence %d: the same context twice", i);
        if (c->skip) return sp_fail(err, SP_ERR_ARG, "sequence %d: layer skipping is set", i);
        if (sp_pool_n_threads(c->pool) < nth)
            return sp_fail(err, SP_ERR_ARG,
                           "sequence %d: its context has %d threads, fewer than the first's %d", i,
                           sp_pool_n_threads(c->pool), nth);
        if (batches[i].n < 1 || (int64_t)n + batches[i].n > lead->max_batch)
            return sp_fail(err, SP_ERR_ARG,
                           "%s tokens in one forward (the first context takes 1 to %d)",
                           batches[i].n < 1 ? "no" : "too many", lead->max_batch);
        sq[i] = (seq_rows){.c = c, .b = &batches[i], .row0 = n};
        sp_status st = check_seq(lead, &sq[i], err);
        if (st) return st;
        n += batches[i].n;
    }
    return forward_seqs(lead, sq, n_seq, n, NULL, logits, err);
}
