/* moe: the mixture-of-experts FFN block (contract in moe.h): routing,
 * grouping of a batch's rows by expert, and the expert matmuls run as one
 * parallel job per phase (gate and up of every selected expert fused with
 * the activation, then down). */
#include "moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "ops.h"
#include "quant.h"
#include "threadpool.h"

/* Below this many multiply-adds a phase runs on the calling thread. */
#define MOE_PAR_MIN_WORK (1 << 17)

/* ------------------------------------------------------------ matmul job */

/* One phase's matmuls: task i applies weight w[i] to n[i] prepared rows
 * (x[i], x_stride apart) into y[i] (ld floats apart). Rows are cut into
 * chunks of 16 (a packed group) or more that threads claim in turn.
 * A fused task (fn2 set: an expert's gate in mm, its up in mm2) computes
 * both matrices' rows [r0, r1) for the expert's tokens back to back, while
 * their activation rows are in cache, then that slice's scale, bias and
 * activation (g <- act(g, u)), so no separate pass over g and u follows.
 * Chunk starts are multiples of 16, so the activation kernel splits each
 * row into vector body and tail where a whole-row call would: the same
 * bits. */
#define MOE_MAX_TASKS 1024
typedef struct moe_job {
    int n_tasks;
    sp_mm mm[MOE_MAX_TASKS], mm2[MOE_MAX_TASKS];
    sp_mm_kernel fn[MOE_MAX_TASKS], fn2[MOE_MAX_TASKS];
    int32_t expert[MOE_MAX_TASKS];
    int64_t rows[MOE_MAX_TASKS], chunk_rows[MOE_MAX_TASKS], chunk_end[MOE_MAX_TASKS];
    const struct sp_layer *L; /* fused tasks: the layer's expert scales and biases */
    bool oai;                 /* fused tasks: gpt-oss's clamped SwiGLU */
    _Atomic int64_t next;
} moe_job;

struct sp_moe_scratch {
    int32_t chunk;          /* tokens per step (<= SP_MOE_CHUNK) */
    int32_t n_expert, k, dim, ffn;
    float *logits;          /* [chunk][n_expert] */
    int32_t *sel;           /* [chunk][k] selected experts */
    float *w;               /* [chunk][k] their weights */
    int32_t *count, *start; /* [n_expert], [n_expert + 1]: rows per expert, first row */
    int32_t *row_of;        /* [chunk][k]: the grouped row of (token, slot) */
    float *xg;              /* [chunk * k][dim] inputs, grouped by expert */
    float *g, *u;           /* [chunk * k][ffn] gate, up, then the activation in g */
    float *y;               /* [chunk * k][dim] expert outputs */
    uint8_t *act[2];        /* [chunk * k][act_stride] prepared activations (gate's, up's) */
    size_t act_stride;
    struct moe_job *job;
    uint64_t experts_read, steps;
};

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

void sp_moe_scratch_free(sp_moe_scratch *s) {
    if (!s) return;
    free(s->logits);
    free(s->sel);
    free(s->w);
    free(s->count);
    free(s->start);
    free(s->row_of);
    free(s->xg);
    free(s->g);
    free(s->u);
    free(s->y);
    free(s->act[0]);
    free(s->act[1]);
    free(s->job);
    free(s);
}

sp_status sp_moe_scratch_init(const sp_model *m, int32_t max_batch, sp_moe_scratch **out, sp_error *err) {
    *out = NULL;
    const sp_moe_cfg *mc = &m->moe;
    if (mc->n_expert == 0) return SP_OK;
    sp_moe_scratch *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SP_ERR_NOMEM, "out of memory for expert scratch");
    s->chunk = max_batch < SP_MOE_CHUNK ? max_batch : SP_MOE_CHUNK;
    s->n_expert = mc->n_expert, s->k = mc->n_used, s->dim = m->cfg.dim, s->ffn = mc->ffn;
    const size_t rows = (size_t)s->chunk * (size_t)s->k;
    const int64_t maxk = s->dim > s->ffn ? s->dim : s->ffn;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++)
        if (sp_quant_loadable((sp_ggml_type)t) && sp_ops_act_bytes((sp_ggml_type)t, maxk) > s->act_stride)
            s->act_stride = sp_ops_act_bytes((sp_ggml_type)t, maxk);
    s->logits = alloc64((size_t)s->chunk * (size_t)s->n_expert * sizeof(float));
    s->sel = malloc(rows * sizeof(int32_t));
    s->w = malloc(rows * sizeof(float));
    s->count = malloc((size_t)s->n_expert * sizeof(int32_t));
    s->start = malloc(((size_t)s->n_expert + 1) * sizeof(int32_t));
    s->row_of = malloc(rows * sizeof(int32_t));
    s->xg = alloc64(rows * (size_t)s->dim * sizeof(float));
    s->g = alloc64(rows * (size_t)s->ffn * sizeof(float));
    s->u = alloc64(rows * (size_t)s->ffn * sizeof(float));
    s->y = alloc64(rows * (size_t)s->dim * sizeof(float));
    s->act[0] = alloc64(rows * s->act_stride);
    s->act[1] = alloc64(rows * s->act_stride);
    s->job = malloc(sizeof *s->job);
    if (!s->logits || !s->sel || !s->w || !s->count || !s->start || !s->row_of || !s->xg || !s->g || !s->u ||
        !s->y || !s->act[0] || !s->act[1] || !s->job) {
        sp_moe_scratch_free(s);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for expert scratch");
    }
    *out = s;
    return SP_OK;
}

void sp_moe_stats(const sp_moe_scratch *s, uint64_t *experts_read, uint64_t *steps) {
    *experts_read = s ? s->experts_read : 0;
    *steps = s ? s->steps : 0;
}

void sp_moe_stats_reset(sp_moe_scratch *s) {
    if (s) s->experts_read = s->steps = 0;
}

static void swiglu_oai(float *out, const float *g, const float *u, int64_t n);

/* Columns [c0, c1) of n rows of y (ld floats apart): y * s[e], then +
 * b[e * cols + i] (cols: the full row length). */
static void scale_bias_cols(float *y, int64_t ld, int32_t n, int64_t cols, int64_t c0, int64_t c1, const float *s,
                            const float *b, int32_t e) {
    if (!s && !b) return;
    for (int32_t r = 0; r < n; r++) {
        float *row = y + (int64_t)r * ld;
        if (s)
            for (int64_t i = c0; i < c1; i++) row[i] *= s[e];
        if (b)
            for (int64_t i = c0; i < c1; i++) row[i] += b[(int64_t)e * cols + i];
    }
}

/* Rows [r0, r1) of task i (moe_job). */
static void run_range(const moe_job *j, int i, int64_t r0, int64_t r1) {
    j->fn[i](&j->mm[i], r0, r1);
    if (!j->fn2[i]) return;
    j->fn2[i](&j->mm2[i], r0, r1);
    const sp_mm *g = &j->mm[i], *u = &j->mm2[i];
    const int32_t e = j->expert[i];
    const int64_t cols = j->rows[i];
    scale_bias_cols(g->y, g->ld_y, g->n, cols, r0, r1, j->L->exp_gate_s, j->L->exp_gate_b, e);
    scale_bias_cols(u->y, u->ld_y, u->n, cols, r0, r1, j->L->exp_up_s, j->L->exp_up_b, e);
    for (int32_t t = 0; t < g->n; t++) {
        float *gy = g->y + t * g->ld_y + r0;
        const float *uy = u->y + t * u->ld_y + r0;
        if (j->oai) swiglu_oai(gy, gy, uy, r1 - r0);
        else sp_ops_swiglu()(gy, gy, uy, r1 - r0);
    }
}

static void moe_job_run(void *arg, int ith, int nth) {
    moe_job *j = arg;
    (void)ith;
    if (nth == 1) {
        for (int i = 0; i < j->n_tasks; i++) run_range(j, i, 0, j->rows[i]);
        return;
    }
    const int64_t total = j->n_tasks ? j->chunk_end[j->n_tasks - 1] : 0;
    int i = 0;
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total) return;
        while (c >= j->chunk_end[i]) i++; /* claims only increase */
        const int64_t r0 = (c - (i ? j->chunk_end[i - 1] : 0)) * j->chunk_rows[i];
        const int64_t r1 = r0 + j->chunk_rows[i];
        run_range(j, i, r0, r1 < j->rows[i] ? r1 : j->rows[i]);
    }
}

/* The matmul of w over n prepared rows x into y (ld floats apart). */
static sp_mm_kernel mm_of(const sp_weight *w, const void *x, size_t x_stride, int32_t n, float *y, int64_t ld,
                          sp_mm *mm) {
    /* F16 in ggml's vec_dot_f16 order, over the original rows (moe.h) */
    const bool f16 = w->type == SP_GGML_F16;
    sp_mm_kernel pk = w->packed && !f16 ? sp_ops_mm_packed(w->type) : NULL;
    *mm = (sp_mm){.wtype = w->type, .w = pk ? w->packed : w->data,
                  .w_stride = pk ? w->packed_stride : w->row_bytes, .k = w->cols,
                  .x = x, .x_stride = x_stride, .n = n, .y = y, .ld_y = ld};
    sp_mm_kernel fn = pk ? pk : f16 ? sp_ops_mm_f16_vecdot() : sp_ops_mm(w->type);
    SP_ASSERT(fn != NULL);
    return fn;
}

static void moe_job_add(moe_job *j, const sp_weight *w, const void *x, size_t x_stride, int32_t n, float *y,
                        int64_t ld) {
    SP_ASSERT(j->n_tasks < MOE_MAX_TASKS);
    const int i = j->n_tasks++;
    j->fn[i] = mm_of(w, x, x_stride, n, y, ld, &j->mm[i]);
    j->fn2[i] = NULL;
    j->rows[i] = w->rows;
}

/* A fused task (moe_job): expert e's gate (xg rows) and up (xu rows) into
 * g and u, then its scale, bias and activation. */
static void moe_job_add_gate_up(moe_job *j, int32_t e, const void *xg, const void *xu, size_t xg_stride,
                                size_t xu_stride, int32_t n, float *g, float *u, int64_t ld) {
    const sp_weight *wg = &j->L->exp_gate[e], *wu = &j->L->exp_up[e];
    SP_ASSERT(j->n_tasks < MOE_MAX_TASKS && wg->rows == wu->rows);
    const int i = j->n_tasks++;
    j->fn[i] = mm_of(wg, xg, xg_stride, n, g, ld, &j->mm[i]);
    j->fn2[i] = mm_of(wu, xu, xu_stride, n, u, ld, &j->mm2[i]);
    j->expert[i] = e;
    j->rows[i] = wg->rows;
}

static void moe_job_exec(sp_pool *pool, moe_job *j) {
    uint64_t work = 0;
    for (int i = 0; i < j->n_tasks; i++)
        work += (uint64_t)j->rows[i] * (uint64_t)j->mm[i].k * (uint64_t)j->mm[i].n * (j->fn2[i] ? 2 : 1);
    const int nth = sp_pool_n_threads(pool);
    if (work < MOE_PAR_MIN_WORK || nth == 1) {
        moe_job_run(j, 0, 1);
        return;
    }
    /* about 4 chunks per thread over the whole phase, in multiples of 16 rows */
    uint64_t rows = 0;
    for (int i = 0; i < j->n_tasks; i++) rows += (uint64_t)j->rows[i] * (j->fn2[i] ? 2 : 1);
    int64_t cr = (int64_t)(rows / (uint64_t)(4 * nth)) / 16 * 16;
    if (cr < 16) cr = 16;
    int64_t end = 0;
    for (int i = 0; i < j->n_tasks; i++) {
        j->chunk_rows[i] = cr;
        end += (j->rows[i] + cr - 1) / cr;
        j->chunk_end[i] = end;
    }
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    sp_pool_run(pool, moe_job_run, j);
}

/* Prepared input rows (x: n rows of k floats, k floats apart) for weight
 * type t in activation buffer `slot`, or x itself for F32; F16/BF16 read
 * x rounded to their type (ggml's conversion to the vec_dot type), as
 * floats in the buffer. */
static const void *prepare(sp_moe_scratch *s, int slot, sp_ggml_type t, const float *x, int64_t k, int32_t n,
                           size_t *stride) {
    uint8_t *act = s->act[slot];
    *stride = s->act_stride;
    if (t == SP_GGML_F16 || t == SP_GGML_BF16) {
        for (int32_t r = 0; r < n; r++) {
            float *d = (float *)(act + (size_t)r * s->act_stride);
            const float *src = x + (int64_t)r * k;
            for (int64_t i = 0; i < k; i++)
                d[i] = t == SP_GGML_F16 ? sp_fp16_to_fp32(sp_fp32_to_fp16(src[i])) : sp_bf16_to_fp32(sp_fp32_to_bf16(src[i]));
        }
        return act;
    }
    if (!sp_ops_act_is_q8(t)) {
        *stride = (size_t)k * sizeof(float);
        return x;
    }
    for (int32_t r = 0; r < n; r++) sp_ops_act_prepare(t, x + (int64_t)r * k, k, act + (size_t)r * s->act_stride);
    return act;
}

/* --------------------------------------------------------------- routing */

/* Top-k of p (n values): the largest first, equal values by lower index
 * (a NaN is never larger, so it is taken only when nothing else is left). */
static void top_k(const float *p, int32_t n, int32_t k, int32_t *sel) {
    uint64_t taken[4] = {0}; /* n_expert <= 256 (checked at load) */
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; e++) {
            if (taken[e / 64] >> (e % 64) & 1) continue;
            if (best < 0 || p[e] > p[best]) best = e;
        }
        sel[j] = best;
        taken[best / 64] |= 1ull << (best % 64);
    }
}

/* ggml's CPU soft_max of one row (AVX-512 build): the max; e = exp(x - max)
 * by its vector exp (sp_exp_ggml) on whole groups of 16, each group's
 * sp_reduce16 added to a double sum, then expf on the remaining elements,
 * each added to the sum; then x = e * (float)(1 / sum). */
static void softmax_ggml(float *x, int32_t n) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; l++) x[i + l] = sp_exp_ggml(x[i + l] - mx);
        sum += (double)sp_reduce16(x + i);
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) x[i] *= inv;
}

static void route(sp_moe_scratch *s, const sp_moe_cfg *mc, int32_t n) {
    const int32_t E = s->n_expert, K = s->k;
    for (int32_t t = 0; t < n; t++) {
        float *p = s->logits + (int64_t)t * E;
        int32_t *sel = s->sel + (int64_t)t * K;
        float *w = s->w + (int64_t)t * K;
        if (mc->gating == SP_MOE_SOFTMAX) softmax_ggml(p, E);
        else if (mc->gating == SP_MOE_SIGMOID)
            for (int32_t e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
        top_k(p, E, K, sel);
        for (int32_t j = 0; j < K; j++) w[j] = p[sel[j]];
        if (mc->gating == SP_MOE_SOFTMAX_WEIGHT) softmax_ggml(w, K);
        if (mc->norm_w) {
            double sum = 0;
            for (int32_t j = 0; j < K; j++) sum += (double)w[j];
            float fs = (float)sum;
            if (!(fs >= 6.103515625e-5f)) fs = fs != fs ? fs : 6.103515625e-5f; /* clamp, NaN stays */
            for (int32_t j = 0; j < K; j++) w[j] = w[j] / fs;
        }
        if (mc->w_scale != 0.0f && mc->w_scale != 1.0f)
            for (int32_t j = 0; j < K; j++) w[j] *= mc->w_scale;
    }
}

/* gpt-oss's clamped SwiGLU (moe.h), ggml's scalar form. */
static void swiglu_oai(float *out, const float *g, const float *u, int64_t n) {
    const float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] < limit ? g[i] : limit;
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        out[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
    }
}

/* One chunk of n <= s->chunk tokens. */
static void moe_chunk(sp_moe_scratch *s, sp_pool *pool, const sp_model *m, const sp_layer *L, const float *x,
                      int64_t x_stride, int32_t n, float *out, int64_t out_stride) {
    const sp_moe_cfg *mc = &m->moe;
    const int32_t E = s->n_expert, K = s->k;
    const int64_t dim = s->dim, ffn = s->ffn;
    moe_job *job = s->job;

    /* router */
    job->n_tasks = 0;
    size_t xs;
    for (int32_t t = 0; t < n; t++) memcpy(s->xg + t * dim, x + t * x_stride, (size_t)dim * sizeof(float));
    const void *xa = prepare(s, 0, L->gate_inp.type, s->xg, dim, n, &xs);
    moe_job_add(job, &L->gate_inp, xa, xs, n, s->logits, E);
    moe_job_exec(pool, job);
    if (L->gate_inp_b)
        for (int32_t t = 0; t < n; t++)
            for (int32_t e = 0; e < E; e++) s->logits[(int64_t)t * E + e] += L->gate_inp_b[e];
    route(s, mc, n);

    /* group the (token, slot) rows by expert */
    memset(s->count, 0, (size_t)E * sizeof(int32_t));
    for (int32_t i = 0; i < n * K; i++) s->count[s->sel[i]]++;
    s->start[0] = 0;
    int32_t used = 0;
    for (int32_t e = 0; e < E; e++) {
        s->start[e + 1] = s->start[e] + s->count[e];
        used += s->count[e] > 0;
    }
    s->experts_read += (uint64_t)used;
    s->steps++;
    for (int32_t e = 0; e < E; e++) s->count[e] = 0;
    for (int32_t t = 0; t < n; t++)
        for (int32_t j = 0; j < K; j++) {
            const int32_t e = s->sel[t * K + j], r = s->start[e] + s->count[e]++;
            s->row_of[t * K + j] = r;
            memcpy(s->xg + (int64_t)r * dim, x + t * x_stride, (size_t)dim * sizeof(float));
        }
    const int32_t R = n * K;

    /* gate and up of every selected expert (one type per tensor), fused
     * with their scale, bias and activation into g */
    job->n_tasks = 0;
    job->L = L;
    job->oai = mc->swiglu_oai;
    const sp_ggml_type tg = L->exp_gate[0].type, tu = L->exp_up[0].type;
    xa = prepare(s, 0, tg, s->xg, dim, R, &xs);
    size_t xbs = xs;
    const void *xb = tu == tg ? xa : prepare(s, 1, tu, s->xg, dim, R, &xbs);
    for (int32_t e = 0; e < E; e++) {
        const int32_t c = s->start[e + 1] - s->start[e];
        if (!c) continue;
        const size_t r0 = (size_t)s->start[e];
        moe_job_add_gate_up(job, e, (const uint8_t *)xa + r0 * xs, (const uint8_t *)xb + r0 * xbs, xs, xbs, c,
                            s->g + (int64_t)r0 * ffn, s->u + (int64_t)r0 * ffn, ffn);
    }
    moe_job_exec(pool, job);

    /* down */
    job->n_tasks = 0;
    xa = prepare(s, 0, L->exp_down[0].type, s->g, ffn, R, &xs);
    for (int32_t e = 0; e < E; e++) {
        const int32_t c = s->start[e + 1] - s->start[e];
        if (!c) continue;
        const size_t r0 = (size_t)s->start[e];
        moe_job_add(job, &L->exp_down[e], (const uint8_t *)xa + r0 * xs, xs, c, s->y + (int64_t)r0 * dim, dim);
    }
    moe_job_exec(pool, job);
    for (int32_t e = 0; e < E; e++) {
        const int32_t c = s->start[e + 1] - s->start[e];
        if (c) scale_bias_cols(s->y + (int64_t)s->start[e] * dim, dim, c, dim, 0, dim, L->exp_down_s, L->exp_down_b, e);
    }

    /* weighted sum in slot order */
    for (int32_t t = 0; t < n; t++) {
        float *o = out + t * out_stride;
        for (int32_t j = 0; j < K; j++) {
            const float *y = s->y + (int64_t)s->row_of[t * K + j] * dim, wj = s->w[t * K + j];
            if (j == 0)
                for (int64_t i = 0; i < dim; i++) o[i] = y[i] * wj;
            else
                for (int64_t i = 0; i < dim; i++) o[i] += y[i] * wj;
        }
    }
}

void sp_moe_ffn(sp_moe_scratch *s, sp_pool *pool, const sp_model *m, const sp_layer *L, const float *x,
                int64_t x_stride, int32_t n, float *out, int64_t out_stride) {
    for (int32_t t0 = 0; t0 < n; t0 += s->chunk) {
        const int32_t c = n - t0 < s->chunk ? n - t0 : s->chunk;
        moe_chunk(s, pool, m, L, x + t0 * x_stride, x_stride, c, out + t0 * out_stride, out_stride);
    }
}
