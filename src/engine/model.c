/* model: inference contexts and the forward pass over a batch of tokens
 * (chains or trees) with a KV cache. Arithmetic only: loading lives in
 * model_load.c, kernels in ops*.c. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "deltanet.h"
#include "model_internal.h"
#include "threadpool.h"
#include "ops.h"
#include "quant.h"

/* Below this many multiply-adds a job runs on the calling thread: waking
 * workers costs more than it saves (all of stories260K falls here). */
#define PAR_MIN_WORK (1 << 17)
/* activation values a batch needs before its quantisation is spread over the pool */
#define ACT_PAR_MIN (1 << 14)

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
    float *hb, *hb2;      /* [B][ffn] (with a shared expert: [B][max(ffn, sh_ffn, dim)]) */
    float *sh_g;          /* [B] shared expert gate logits, or NULL */
    float *x2;            /* [B][dim] attention / FFN block outputs */
    float *kb, *vb;       /* [B][kv_dim] new keys/values of a multi-sequence forward,
                           * copied into each sequence's cache */
    uint8_t *act;         /* [3][B][act_stride] prepared activations, one slot per
                           * matmul of a job (a mixed file's wq/wk/wv may differ in type) */
    size_t act_stride;
    uint64_t scratch_bytes; /* sp_ctx_scratch_bytes */
    int32_t att_rows;     /* query rows per attention task (attention.h) */
    uint8_t *att_scratch; /* [nth] sp_att_scratch_bytes(att_rows, n_ctx, head_dim) */
    int32_t *pos;         /* [B] */
    sp_rope_freqs rope;   /* RoPE angles (ops.h) */
    float *rope_cs;       /* [B][rot_dim] cos/sin per new token */
    sp_rope_freqs rope_local; /* the same for rope_local layers (gemma3) */
    float *rope_cs_local;     /* [B][rot_dim] for them, or NULL */
    float *gate;          /* [B][q_dim] attention output gates (model attn_gated), or NULL */
    sp_rstate *rs;        /* the recurrent layers' state (deltanet.h), or NULL */
    int32_t *kv_layer;    /* [n_layers] each attention layer's layer of the cache (recurrent
                           * layers have none: the cache holds the attention layers only) */
    sp_moe_scratch *moe;      /* expert scratch (moe.h), or NULL for a dense model */
    /* hidden-state taps (sp_ctx_set_taps): residual stream entering layer
     * tap_layer[i] (n_layers: the final state before the output norm) */
    int32_t n_taps;
    int32_t *tap_layer;   /* [n_taps] */
    float *taps;          /* [n_taps][B][dim] rows of the last forward */
    int32_t tap_rows;     /* rows the last forward recorded */
    bool mtp;             /* a context of the first MTP block (sp_forward_mtp) */
    float *cat;           /* [B][2 dim] its [normed embedding; normed h] rows, or NULL */
};

sp_ctx_params sp_ctx_default_params(void) {
    sp_ctx_params p = {.n_ctx = 0, .max_batch = SP_CTX_DEFAULT_BATCH, .n_threads = 1, .pool = NULL,
                       .type_k = SP_GGML_F16, .type_v = SP_GGML_F16};
    return p;
}

const sp_model *sp_ctx_model(const sp_ctx *c) { return c->m; }
int32_t sp_ctx_n_ctx(const sp_ctx *c) { return c->kv.n_ctx; }
int32_t sp_ctx_max_batch(const sp_ctx *c) { return c->max_batch; }
uint64_t sp_ctx_kv_bytes(const sp_ctx *c) {
    return sp_kv_bytes(c->kv.type_k, c->kv.type_v, c->kv.n_layers, c->kv.kv_dim, c->kv.n_ctx);
}
sp_ggml_type sp_ctx_type_k(const sp_ctx *c) { return c->kv.type_k; }
sp_ggml_type sp_ctx_type_v(const sp_ctx *c) { return c->kv.type_v; }
uint64_t sp_ctx_scratch_bytes(const sp_ctx *c) { return c->scratch_bytes; }
uint64_t sp_ctx_kv_bytes_allocated(const sp_ctx *c) {
    return sp_kv_bytes(c->kv.type_k, c->kv.type_v, c->kv.n_layers, c->kv.kv_dim, c->kv.n_alloc);
}
int32_t sp_ctx_n_past(const sp_ctx *c) { return c->kv.n; }
sp_kv *sp_ctx_kv(sp_ctx *c) { return &c->kv; }
sp_moe_scratch *sp_ctx_moe(sp_ctx *c) { return c->moe; }
void sp_ctx_expert_reads(const sp_ctx *c, uint64_t *experts, uint64_t *steps) { sp_moe_stats(c->moe, experts, steps); }
void sp_ctx_expert_reads_reset(sp_ctx *c) { sp_moe_stats_reset(c->moe); }
sp_pool *sp_ctx_pool(sp_ctx *c) { return c->pool; }

/* The recurrent state first: it may refuse a rollback the cache allows. */
sp_status sp_ctx_truncate(sp_ctx *c, int32_t n, sp_error *err) {
    if (c->rs && n >= 0 && n <= c->kv.n) {
        sp_status st = sp_rstate_truncate(c->rs, n, err);
        if (st) return st;
    }
    return sp_kv_truncate(&c->kv, n, err);
}

int32_t sp_ctx_pin(sp_ctx *c) {
    if (!c->rs) return c->kv.n;
    sp_rstate_pin(c->rs);
    return c->kv.n;
}

sp_status sp_ctx_keep(sp_ctx *c, int32_t start, const int32_t *idx, int32_t m, sp_error *err) {
    if (c->rs) {
        sp_status st = sp_rstate_keep(c->rs, start, idx, m, err);
        if (st) return st;
    }
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
    free(c->tap_layer);
    free(c->taps);
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
    free(c->sh_g);
    free(c->x2);
    free(c->act);
    free(c->att_scratch);
    free(c->pos);
    free(c->rope_cs);
    free(c->rope_cs_local);
    free(c->gate);
    free(c->cat);
    free(c->kv_layer);
    sp_rstate_free(c->rs);
    sp_moe_scratch_free(c->moe);
    free(c);
}

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

/* YaRN's parameters as llama.cpp's context sets them for a file that gives
 * only the type, factor, original context and attention factor: extension
 * factor 1, betas 32 and 1, and an attention factor of get_mscale(factor)
 * / (1 + 0.1 ln factor) times the file's (the FMAs GCC forms). */
static void yarn_setup(sp_rope_freqs *f, const sp_model *m, float base) {
    const float factor = 1.0f / f->freq_scale;
    f->yarn = true;
    f->ext_factor = 1.0f;
    f->attn_factor = factor <= 1.0f ? 1.0f : fmaf(0.1f, logf(factor), 1.0f);
    f->attn_factor *= 1.0f / fmaf(0.1f, logf(factor), 1.0f);
    f->attn_factor *= m->rope_attn_factor;
    sp_rope_yarn_corr(m->cfg.rot_dim, m->n_ctx_orig, base, 32.0f, 1.0f, f->corr);
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
    int32_t n_att = 0;
    c->mtp = p->mtp;
    if (!st && p->mtp && m->n_mtp < 1) st = sp_fail(err, SP_ERR_ARG, "the model has no MTP layers");
    c->kv_layer = malloc((size_t)(cfg->n_layers + m->n_mtp) * sizeof *c->kv_layer);
    if (!st && !c->kv_layer) st = sp_fail(err, SP_ERR_NOMEM, "out of memory");
    /* an MTP context caches its block's layer only (as llama.cpp's MTP context) */
    for (int32_t l = 0; !st && l < cfg->n_layers + m->n_mtp; l++)
        c->kv_layer[l] = (l >= cfg->n_layers) != p->mtp || m->layers[l].dn ? -1 : n_att++;
    if (!st) /* at least one layer's rows, unused if every layer is recurrent */
        st = sp_kv_init(&c->kv, n_att > 0 ? n_att : 1, cfg->n_kv_heads * cfg->head_dim, cfg->head_dim, n_ctx,
                        p->type_k, p->type_v, SP_KV_K_BY_HEAD, err);
    if (!st) st = sp_moe_scratch_init(m, p->max_batch, &c->moe, err);
    if (st) {
        sp_ctx_free(c);
        return st;
    }
    const size_t B = (size_t)p->max_batch;
    const int64_t q_dim = (int64_t)cfg->n_heads * cfg->head_dim;
    const int64_t wide = q_dim > cfg->dim ? q_dim : cfg->dim;
    int64_t maxk = wide > cfg->ffn_dim ? wide : cfg->ffn_dim;
    if ((int64_t)m->dn.n_v * m->dn.hv > maxk) maxk = (int64_t)m->dn.n_v * m->dn.hv;
    if (m->sh_ffn > maxk) maxk = m->sh_ffn;
    if (p->mtp && 2 * (int64_t)cfg->dim > maxk) maxk = 2 * (int64_t)cfg->dim; /* eh_proj's input */
    /* act rows must fit the widest input of any matrix type present */
    c->act_stride = 0;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++)
        if (sp_quant_loadable((sp_ggml_type)t) && sp_ops_act_bytes((sp_ggml_type)t, maxk) > c->act_stride)
            c->act_stride = sp_ops_act_bytes((sp_ggml_type)t, maxk);
    int nth = sp_pool_n_threads(c->pool);
    c->x = alloc64(B * (size_t)cfg->dim * 4);
    c->xb = alloc64(B * (size_t)wide * 4);
    c->q = alloc64(B * (size_t)q_dim * 4 * (m->attn_gated ? 2 : 1));
    if (m->attn_gated) c->gate = alloc64(B * (size_t)q_dim * 4);
    if (p->mtp) c->cat = alloc64(B * 2 * (size_t)cfg->dim * 4);
    if (m->dn.n_layers > 0 && !p->mtp &&
        (st = sp_rstate_init(m, p->max_batch, sp_pool_n_threads(c->pool), &c->rs, err))) {
        sp_ctx_free(c);
        return st;
    }
    int64_t hbw = cfg->ffn_dim;
    if (m->sh_ffn > 0) {
        hbw = hbw > m->sh_ffn ? hbw : m->sh_ffn;
        hbw = hbw > cfg->dim ? hbw : cfg->dim;
        c->sh_g = alloc64(B * 4);
    }
    c->hb = alloc64(B * (size_t)hbw * 4);
    c->hb2 = alloc64(B * (size_t)hbw * 4);
    c->x2 = alloc64(B * (size_t)cfg->dim * 4);
    c->kb = alloc64(B * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim * 4);
    c->vb = alloc64(B * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim * 4);
    c->act = alloc64(3 * B * c->act_stride);
    SP_ASSERT(cfg->n_heads / cfg->n_kv_heads <= SP_ATT_ROWS_CAP);
    c->att_rows = sp_att_rows_max(cfg->n_heads, cfg->n_kv_heads, p->max_batch, n_ctx);
    c->att_scratch = alloc64((size_t)nth * sp_att_scratch_bytes(c->att_rows, n_ctx, cfg->head_dim));
    c->pos = malloc(B * sizeof(int32_t));
    c->rope_cs = malloc(B * (size_t)cfg->rot_dim * sizeof(float));
    /* phi3's long factors beyond its original context, as llama.cpp chooses them */
    const float *factors = m->rope_factors ? m->rope_factors
                           : n_ctx > m->n_ctx_orig && m->rope_long ? m->rope_long : m->rope_short;
    c->rope = (sp_rope_freqs){.theta_scale = powf(cfg->rope_theta, -2.0f / (float)cfg->rot_dim),
                              .freq_scale = cfg->rope_scale, .factors = factors};
    if (m->rope_yarn) yarn_setup(&c->rope, m, cfg->rope_theta);
    if (m->rope_theta_local > 0) {
        c->rope_cs_local = malloc(B * (size_t)cfg->rot_dim * sizeof(float));
        c->rope_local = (sp_rope_freqs){.theta_scale = powf(m->rope_theta_local, -2.0f / (float)cfg->rot_dim),
                                        .freq_scale = m->rope_scale_local > 0 ? m->rope_scale_local : 1.0f};
        if (m->rope_yarn) yarn_setup(&c->rope_local, m, m->rope_theta_local); /* gpt-oss's sliding layers */
        if (!c->rope_cs_local) {
            sp_ctx_free(c);
            return sp_fail(err, SP_ERR_NOMEM, "out of memory for context scratch");
        }
    }
    { /* what the rows above take (sp_ctx_scratch_bytes) */
        const size_t rows = (size_t)cfg->dim * 2 + (size_t)wide + (size_t)q_dim * (m->attn_gated ? 3 : 1) +
                            (p->mtp ? 2 * (size_t)cfg->dim : 0) + 2 * (size_t)hbw +
                            2 * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim + 1 + (size_t)cfg->rot_dim;
        c->scratch_bytes = (uint64_t)B * (rows * 4 + 3 * c->act_stride) +
                           (uint64_t)nth * sp_att_scratch_bytes(c->att_rows, n_ctx, cfg->head_dim);
    }
    if (!c->x || !c->xb || !c->q || !c->kb || !c->vb || !c->hb || !c->hb2 || !c->x2 || !c->act ||
        !c->att_scratch || !c->pos || !c->rope_cs || (m->attn_gated && !c->gate) || (m->sh_ffn > 0 && !c->sh_g) ||
        (p->mtp && !c->cat)) {
        sp_ctx_free(c);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for context scratch");
    }
    *out = c;
    return SP_OK;
}

sp_status sp_ctx_set_taps(sp_ctx *c, const int32_t *layers, int32_t n, sp_error *err) {
    if (n < 0 || n > SP_MAX_TAPS || (n > 0 && !layers))
        return sp_fail(err, SP_ERR_ARG, "taps: %d layers (0 to %d)", n, SP_MAX_TAPS);
    for (int32_t i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] > c->m->cfg.n_layers)
            return sp_fail(err, SP_ERR_ARG, "taps: layer %d outside [0, %d] of a %d-layer model",
                           layers[i], c->m->cfg.n_layers, c->m->cfg.n_layers);
    int32_t *tl = NULL;
    float *t = NULL;
    if (n > 0) {
        tl = malloc((size_t)n * sizeof *tl);
        t = alloc64((size_t)n * (size_t)c->max_batch * (size_t)c->m->cfg.dim * sizeof(float));
        if (!tl || !t) {
            free(tl);
            free(t);
            return sp_fail(err, SP_ERR_NOMEM, "out of memory for hidden-state taps");
        }
        memcpy(tl, layers, (size_t)n * sizeof *tl);
    }
    free(c->tap_layer);
    free(c->taps);
    c->tap_layer = tl;
    c->taps = t;
    c->n_taps = n;
    c->tap_rows = 0;
    return SP_OK;
}

int32_t sp_ctx_n_taps(const sp_ctx *c) { return c->n_taps; }

const float *sp_ctx_taps(const sp_ctx *c, int32_t i, int32_t *n_rows) {
    if (n_rows) *n_rows = i >= 0 && i < c->n_taps ? c->tap_rows : 0;
    if (i < 0 || i >= c->n_taps || c->tap_rows == 0) return NULL;
    return c->taps + (size_t)i * (size_t)c->max_batch * (size_t)c->m->cfg.dim;
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

/* Rows [ith n / nth, (ith + 1) n / nth) of an activation preparation
 * (sp_ops_act_prepare per row: each row alone, so any cut gives the same
 * bytes). */
typedef struct act_job {
    sp_ggml_type t;
    const float *src;
    int64_t src_stride, k;
    uint8_t *act;
    size_t act_stride;
    int32_t n;
} act_job;

static void act_job_run(void *arg, int ith, int nth) {
    const act_job *j = arg;
    for (int32_t i = (int32_t)((int64_t)j->n * ith / nth); i < (int32_t)((int64_t)j->n * (ith + 1) / nth); i++)
        sp_ops_act_prepare(j->t, j->src + i * j->src_stride, j->k, j->act + (size_t)i * j->act_stride);
}

/* SwiGLU of a batch's rows (ops.h, per row as ggml's silu), the rows
 * spread over the pool when there are enough of them. */
typedef struct swiglu_job {
    float *hb;
    const float *hb2;
    int64_t ffn;
    int32_t n;
} swiglu_job;

static void swiglu_job_run(void *arg, int ith, int nth) {
    const swiglu_job *j = arg;
    const sp_swiglu_fn f = sp_ops_swiglu();
    for (int32_t t = (int32_t)((int64_t)j->n * ith / nth); t < (int32_t)((int64_t)j->n * (ith + 1) / nth); t++)
        f(j->hb + t * j->ffn, j->hb + t * j->ffn, j->hb2 + t * j->ffn, j->ffn);
}

static void swiglu_rows(sp_ctx *c, float *hb, const float *hb2, int64_t ffn, int32_t n) {
    swiglu_job j = {.hb = hb, .hb2 = hb2, .ffn = ffn, .n = n};
    if ((int64_t)n * ffn >= ACT_PAR_MIN && sp_pool_n_threads(c->pool) > 1)
        sp_pool_run(c->pool, swiglu_job_run, &j);
    else
        swiglu_job_run(&j, 0, 1);
}

/* Prepared activation rows of `src` (n rows of k floats, src_stride floats
 * apart) for weight type t: f32-family weights read src directly; quantised
 * ones read activation slot `slot` of c->act, filled here (a batch's rows
 * spread over the pool). */
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
    act_job aj = {.t = t, .src = src, .src_stride = src_stride, .k = k, .act = act, .act_stride = c->act_stride, .n = n};
    if ((int64_t)n * k >= ACT_PAR_MIN && sp_pool_n_threads(c->pool) > 1)
        sp_pool_run(c->pool, act_job_run, &aj);
    else
        act_job_run(&aj, 0, 1);
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

void sp_ctx_matmul(sp_ctx *c, const sp_mm_out *mm, int n_mm, const float *x, int64_t ld_x, int32_t n) {
    SP_ASSERT(n_mm >= 1 && n_mm <= 3 && n <= c->max_batch);
    mm_job j = {0};
    for (int i = 0; i < n_mm; i++) job_add(c, &j, mm[i].w, x, ld_x, n, mm[i].y, mm[i].ld_y);
    job_exec(c, &j);
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
 * (one matmul each over all rows; keys and values through kb/vb into each
 * sequence's cache, converted to its types),
 * biases and per-head norms where the architecture has them, RoPE,
 * attention of each sequence over its own cache under its batch's mask and
 * the sliding window, the output projection, and the residual add. */
static void attention_block(sp_ctx *c, const seq_rows *sq, int n_seq, int32_t l, int32_t n) {
    const sp_model_config *cfg = &c->m->cfg;
    const sp_layer *L = &c->m->layers[l];
    const int64_t dim = cfg->dim, hd = cfg->head_dim, q_dim = (int64_t)cfg->n_heads * hd;
    const int64_t kv_dim = (int64_t)cfg->n_kv_heads * hd, wide = q_dim > dim ? q_dim : dim;
    float *kd = c->kb, *vd = c->vb;
    for (int32_t t = 0; t < n; t++)
        sp_rmsnorm(c->xb + t * wide, c->x + t * dim, L->attn_norm, dim, cfg->norm_eps);
    mm_job j = {0};
    job_add(c, &j, &L->wq, c->xb, wide, n, c->q, c->gate ? 2 * q_dim : q_dim);
    job_add(c, &j, &L->wk, c->xb, wide, n, kd, kv_dim);
    job_add(c, &j, &L->wv, c->xb, wide, n, vd, kv_dim);
    job_exec(c, &j);
    if (c->gate) sp_gated_attn_split(c->q, c->gate, n, cfg->n_heads, (int32_t)hd);
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
    /* the query scale before the dot (phi3, gemma2; gemma3 over an F16 or
     * Q8_0 cache, model_internal.h); all sequences share the first's types */
    const bool prescale = sq[0].c->kv.type_k == SP_GGML_F32 ? c->m->q_prescale : c->m->q_prescale_lowp;
    if (prescale) {
        const float s = c->m->kq_scale > 0 ? c->m->kq_scale : 1.0f / sqrtf((float)hd);
        for (int64_t i = 0; i < (int64_t)n * q_dim; i++) c->q[i] *= s;
    }
    for (int i = 0; i < n_seq; i++) { /* quantised caches: rotated as llama.cpp (kv.h) */
        const sp_kv *kv = &sq[i].c->kv;
        if (kv->rot_k) {
            sp_fwht(c->q + (int64_t)sq[i].row0 * q_dim, (int64_t)sq[i].n * q_dim, kv->rot_k);
            sp_fwht(kd + (int64_t)sq[i].row0 * kv_dim, (int64_t)sq[i].n * kv_dim, kv->rot_k);
        }
        if (kv->rot_v) sp_fwht(vd + (int64_t)sq[i].row0 * kv_dim, (int64_t)sq[i].n * kv_dim, kv->rot_v);
    }
    const int32_t kl = c->kv_layer[l]; /* the same model in every sequence */
    SP_ASSERT(kl >= 0);
    for (int i = 0; i < n_seq; i++)
        sp_kv_store(&sq[i].c->kv, kl, sq[i].n_past, kd + (int64_t)sq[i].row0 * kv_dim,
                    vd + (int64_t)sq[i].row0 * kv_dim, kv_dim, sq[i].n);
    const float scale = prescale ? 1.0f
                        : c->m->kq_scale > 0 ? c->m->kq_scale : 1.0f / sqrtf((float)hd);
    for (int i = 0; i < n_seq; i++) {
        const int32_t ns = sq[i].n, np = sq[i].n_past;
        sp_ctx *sc = sq[i].c;
        sp_att_job a = {.kv = &sc->kv, .layer = kl, .n = ns, .n_past = np, .n_heads = cfg->n_heads,
                        .n_kv_heads = cfg->n_kv_heads, .head_dim = (int32_t)hd, .scale = scale,
                        .q = c->q + (int64_t)sq[i].row0 * q_dim, .pos = c->pos + sq[i].row0,
                        .mask_base = sq[i].mask_base, .mask_w = np + ns - sq[i].mask_base,
                        .mask = sq[i].b->mask, .window = L->window, .softcap = c->m->attn_softcap,
                        .sinks = L->sinks,
                        .out = c->xb + (int64_t)sq[i].row0 * wide, .out_stride = wide,
                        .rows_max = sc->att_rows, .scratch = sc->att_scratch};
        /* per (token, head, slot): a dot, an exp and an axpy of head_dim,
         * several times a matmul's multiply-add per weight: split sooner */
        uint64_t att_work = (uint64_t)ns * (uint64_t)(np + ns) * (uint64_t)q_dim;
        if (att_work < PAR_MIN_WORK / 4 || sp_pool_n_threads(c->pool) == 1)
            sp_att_job_run(&a, 0, 1);
        else
            sp_att_run(&a, c->pool);
        if (sc->kv.rot_v) /* back from the rotated values */
            for (int32_t t = 0; t < ns; t++) sp_fwht(a.out + t * wide, q_dim, sc->kv.rot_v);
    }
    if (c->gate) sp_gated_attn_apply(c->xb, wide, c->gate, n, q_dim);
    mm_job jo = {0};
    job_add(c, &jo, &L->wo, c->xb, wide, n, c->x2, dim);
    job_exec(c, &jo);
    if (L->post_attn_norm) /* gemma: the block's output is normed before the residual */
        for (int32_t t = 0; t < n; t++)
            sp_rmsnorm(c->x2 + t * dim, c->x2 + t * dim, L->post_attn_norm, dim, cfg->norm_eps);
    for (int64_t i = 0; i < n * dim; i++) c->x[i] += c->x2[i];
}

/* One layer's recurrent block (deltanet.h) for the new tokens of every
 * sequence: norm, the Gated DeltaNet mix over each sequence's own state,
 * the residual add. */
static void recurrent_block(sp_ctx *c, const seq_rows *sq, int n_seq, int32_t l, int32_t n) {
    const sp_model_config *cfg = &c->m->cfg;
    const int64_t dim = cfg->dim, q_dim = (int64_t)cfg->n_heads * cfg->head_dim;
    const int64_t wide = q_dim > dim ? q_dim : dim;
    for (int32_t t = 0; t < n; t++)
        sp_rmsnorm(c->xb + t * wide, c->x + t * dim, c->m->layers[l].attn_norm, dim, cfg->norm_eps);
    sp_dn_seq ds[SP_FORWARD_MAX_SEQS];
    for (int i = 0; i < n_seq; i++) ds[i] = (sp_dn_seq){.rs = sq[i].c->rs, .row0 = sq[i].row0, .n = sq[i].n};
    sp_deltanet_forward(c, ds, n_seq, l, n, c->xb, wide, c->x2);
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

/* One layer's feed-forward block: norm, gate and up, SwiGLU, down, residual
 * (or the experts' block, moe.h). */
static void ffn_block(sp_ctx *c, int32_t l, int32_t n) {
    const sp_model_config *cfg = &c->m->cfg;
    const sp_layer *L = &c->m->layers[l];
    const int64_t dim = cfg->dim, q_dim = (int64_t)cfg->n_heads * cfg->head_dim;
    const int64_t ffn = cfg->ffn_dim, wide = q_dim > dim ? q_dim : dim;
    for (int32_t t = 0; t < n; t++)
        sp_rmsnorm(c->xb + t * wide, c->x + t * dim, L->ffn_norm, dim, cfg->norm_eps);
    if (L->exp_up) { /* mixture of experts (moe.c) */
        sp_moe_ffn(c->moe, c->pool, c->m, L, c->xb, wide, n, c->x2, dim);
        if (L->w2.data) { /* the shared expert, times sigmoid of its gate, added to the experts' sum */
            const int64_t sf = c->m->sh_ffn;
            mm_job js = {0};
            job_add(c, &js, &L->w1, c->xb, wide, n, c->hb, sf);
            job_add(c, &js, &L->w3, c->xb, wide, n, c->hb2, sf);
            job_add(c, &js, &L->sh_gate, c->xb, wide, n, c->sh_g, 1);
            job_exec(c, &js);
            for (int32_t t = 0; t < n; t++) sp_ops_swiglu()(c->hb + t * sf, c->hb + t * sf, c->hb2 + t * sf, sf);
            mm_job jd = {0};
            job_add(c, &jd, &L->w2, c->hb, sf, n, c->hb2, dim);
            job_exec(c, &jd);
            for (int32_t t = 0; t < n; t++) {
                const float g = 1.0f / (1.0f + expf(-c->sh_g[t]));
                for (int64_t i = 0; i < dim; i++) c->x2[t * dim + i] += c->hb2[t * dim + i] * g;
            }
        }
        for (int64_t i = 0; i < n * dim; i++) c->x[i] += c->x2[i];
        return;
    }
    mm_job jf = {0};
    job_add(c, &jf, &L->w1, c->xb, wide, n, c->hb, ffn);
    job_add(c, &jf, &L->w3, c->xb, wide, n, c->hb2, ffn);
    job_exec(c, &jf);
    if (c->m->geglu)
        for (int64_t i = 0; i < n * ffn; i++) c->hb[i] = gelu_ggml(c->hb[i]) * c->hb2[i];
    else
        swiglu_rows(c, c->hb, c->hb2, ffn, n);
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
    sp_status rst = sp_kv_reserve(&c->kv, n_past + n, err);
    if (rst) return rst;
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
    if (c->rs) {
        sp_status st = sp_rstate_check(c->rs, b, n_past, err);
        if (st) return st;
    }
    q->n = n;
    q->n_past = n_past;
    q->mask_base = mask_base;
    return SP_OK;
}

/* Copies every sequence's rows of the residual stream (the lead's x) into
 * the taps of layer l its context asked for. */
static void record_taps(const sp_ctx *lead, const seq_rows *sq, int n_seq, int32_t l) {
    const int64_t dim = lead->m->cfg.dim;
    for (int i = 0; i < n_seq; i++) {
        sp_ctx *c = sq[i].c;
        for (int32_t k = 0; k < c->n_taps; k++)
            if (c->tap_layer[k] == l)
                memcpy(c->taps + (size_t)k * (size_t)c->max_batch * (size_t)dim,
                       lead->x + (int64_t)sq[i].row0 * dim, (size_t)sq[i].n * (size_t)dim * sizeof(float));
        c->tap_rows = sq[i].n;
    }
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
        sp_imrope_text(c->rope_cs + (int64_t)t * cfg->rot_dim, m->rope_sections, cfg->rot_dim);
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

    for (int i = 0; i < n_seq; i++)
        if (sq[i].c->rs) sp_rstate_begin(sq[i].c->rs, sq[i].b, sq[i].n_past);
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        record_taps(c, sq, n_seq, l);
        if (skip && skip[l]) continue;
        if (m->layers[l].dn)
            recurrent_block(c, sq, n_seq, l, n);
        else
            attention_block(c, sq, n_seq, l, n);
        ffn_block(c, l, n);
    }
    record_taps(c, sq, n_seq, cfg->n_layers);

    for (int i = 0; i < n_seq; i++)
        if (sq[i].c->rs) sp_rstate_end(sq[i].c->rs);

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
    if (c->mtp) return sp_fail(err, SP_ERR_ARG, "an MTP context evaluates pairs (sp_forward_mtp), not tokens");
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
        if (c->mtp) return sp_fail(err, SP_ERR_ARG, "sequence %d: an MTP context", i);
        if (c->kv.type_k != lead->kv.type_k || c->kv.type_v != lead->kv.type_v)
            return sp_fail(err, SP_ERR_ARG, "sequence %d: its KV cache types differ from the first's", i);
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

void sp_model_final_norm(const sp_model *m, const float *x, int32_t n, float *out) {
    const int64_t dim = m->cfg.dim;
    for (int32_t t = 0; t < n; t++) sp_rmsnorm(out + t * dim, x + t * dim, m->out_norm, dim, m->cfg.norm_eps);
}

/* The first MTP block over n pairs (token, h), as llama.cpp's qwen35,
 * qwen35moe and qwen3next graph_mtp: x = eh_proj([RMSNorm(embed(token),
 * enorm); RMSNorm(h, hnorm)]), then the block's gated-attention layer (its
 * own cache; the trunk's RoPE: IMRoPE sections or plain NeoX) and FFN
 * (dense, or the experts with the gated shared expert), then the
 * head norm (shared_head_norm, else the output norm) and the head
 * (shared_head_head, else the output matrix). */
sp_status sp_forward_mtp(sp_ctx *c, const sp_batch *b, const float *h, float *logits, float *h_out,
                         sp_error *err) {
    if (!c->mtp) return sp_fail(err, SP_ERR_ARG, "sp_forward_mtp needs an MTP context (sp_ctx_params.mtp)");
    seq_rows q = {.c = c, .b = b};
    sp_status st = check_seq(c, &q, err);
    if (st) return st;
    const sp_model *m = c->m;
    const sp_model_config *cfg = &m->cfg;
    const struct sp_mtp_block *blk = &m->mtp[0];
    const int32_t n = b->n, l = cfg->n_layers;
    const int64_t dim = cfg->dim, q_dim = (int64_t)cfg->n_heads * cfg->head_dim;
    const int64_t wide = q_dim > dim ? q_dim : dim;
    const sp_weight *emb = blk->embed.data ? &blk->embed : &m->tok_embd;
    for (int32_t t = 0; t < n; t++) {
        sp_rope_cs(c->rope_cs + (int64_t)t * cfg->rot_dim, c->pos[t], &c->rope, cfg->rot_dim);
        sp_imrope_text(c->rope_cs + (int64_t)t * cfg->rot_dim, m->rope_sections, cfg->rot_dim);
        float *cat = c->cat + t * 2 * dim;
        sp_dequantize_row(emb->type, emb->data + (size_t)b->tokens[t] * emb->row_bytes, c->x + t * dim, dim);
        sp_rmsnorm(cat, c->x + t * dim, blk->enorm, dim, cfg->norm_eps);
        sp_rmsnorm(cat + dim, h + t * dim, blk->hnorm, dim, cfg->norm_eps);
    }
    mm_job je = {0};
    job_add(c, &je, &blk->eh_proj, c->cat, 2 * dim, n, c->x, dim);
    job_exec(c, &je);
    attention_block(c, &q, 1, l, n);
    ffn_block(c, l, n);
    const int32_t first = b->logits_all ? 0 : n - 1, rows = n - first;
    const float *hn = blk->head_norm ? blk->head_norm : m->out_norm;
    for (int32_t r = 0; r < rows; r++) sp_rmsnorm(c->xb + r * wide, c->x + (first + r) * dim, hn, dim, cfg->norm_eps);
    if (h_out)
        for (int32_t r = 0; r < rows; r++) memcpy(h_out + r * dim, c->xb + r * wide, (size_t)dim * sizeof(float));
    mm_job jl = {0};
    job_add(c, &jl, blk->head.data ? &blk->head : &m->output, c->xb, wide, rows, logits, cfg->n_vocab);
    job_exec(c, &jl);
    c->kv.n = q.n_past + n;
    for (int64_t i = 0; i < (int64_t)rows * cfg->n_vocab; i++)
        if (!isfinite(logits[i]))
            return sp_fail(err, SP_ERR_NUMERIC, "the MTP block produced a non-finite logit at row %lld",
                           (long long)(i / cfg->n_vocab));
    return SP_OK;
}
