/* attention: grouped attention of a batch over a typed KV cache, with
 * llama.cpp's per-row arithmetic (ops.h, attention kernels); see
 * attention.h for the blocking and the split. */
#include "attention.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "ops.h"

static inline bool visible(const sp_att_job *a, int32_t t, int32_t slot) {
    if (slot < a->mask_base) return true;
    if (!a->mask) return slot - a->n_past <= t;
    return a->mask[(int64_t)t * a->mask_w + (slot - a->mask_base)] != 0;
}

/* Byte offset of element e of a row of type t (e a multiple of 32 for Q8_0). */
static size_t elem_offset(sp_ggml_type t, int64_t e) {
    switch (t) {
    case SP_GGML_F16: return (size_t)e * 2;
    case SP_GGML_Q8_0: return (size_t)e / 32 * 34;
    default: return (size_t)e * 4;
    }
}

int32_t sp_att_rows_max(int32_t n_heads, int32_t n_kv_heads, int32_t max_batch, int32_t n_ctx) {
    const int32_t g = n_heads / n_kv_heads;
    int32_t tok = max_batch < 16 ? max_batch : 16;
    while (tok > 1 && g * tok > SP_ATT_ROWS_CAP) tok--;
    while (tok > 1 && (int64_t)g * tok * n_ctx * 4 > (8 << 20)) tok--;
    return g * tok;
}

static size_t up64(size_t b) { return (b + 63) / 64 * 64; }

/* F16 caches: where the ISA has the grouped kernels (ops.h
 * sp_ops_att_scores_grp), each token's query heads read the cache through
 * them (every K and V element converted once per token); otherwise, with
 * at least WIDE_ROWS query rows per task, the cache is read widened to
 * floats, WIDE_SLOTS rows at a time (ops.h sp_ops_att_widen), converted
 * once per task. Either gives the row-by-row bits. */
enum { WIDE_ROWS = 8, WIDE_SLOTS = 64, WIDE_HD_MAX = 1024 };

/* One thread's scratch: scores and visible slots [rows][n_ctx], queries in
 * the dot type [rows][head_dim * 4 bytes], mix accumulators [rows][16][hd],
 * visible counts [rows], widened cache rows [WIDE_SLOTS][hd]. */
size_t sp_att_scratch_bytes(int32_t rows, int32_t n_ctx, int32_t hd) {
    return up64((size_t)rows * (size_t)n_ctx * 4) * 2 + up64((size_t)rows * (size_t)hd * 4) +
           up64((size_t)rows * 16 * (size_t)hd * 4) + up64((size_t)rows * 4) + up64((size_t)WIDE_SLOTS * hd * 4);
}

typedef struct scratch {
    float *S;    /* [R][n_ctx] scores, then probabilities by rank */
    int32_t *IDX; /* [R][n_ctx] rank -> slot under a mask */
    uint8_t *QB; /* [R][hd * 4] queries in the dot type */
    float *ACC;  /* [R][16][hd] mix accumulators */
    int32_t *NV; /* [R] visible ranks */
    float *W;    /* [WIDE_SLOTS][hd] widened cache rows */
} scratch;

static scratch scratch_of(const sp_att_job *a, int i) {
    const int32_t R = a->rows_max, n_ctx = a->kv->n_ctx, hd = a->head_dim;
    uint8_t *base = a->scratch + (size_t)i * sp_att_scratch_bytes(R, n_ctx, hd);
    const size_t sb = up64((size_t)R * (size_t)n_ctx * 4);
    scratch s = {.S = (float *)base, .IDX = (int32_t *)(base + sb), .QB = base + 2 * sb};
    s.ACC = (float *)(s.QB + up64((size_t)R * (size_t)hd * 4));
    s.NV = (int32_t *)((uint8_t *)s.ACC + up64((size_t)R * 16 * (size_t)hd * 4));
    s.W = (float *)((uint8_t *)s.NV + up64((size_t)R * 4));
    return s;
}

/* Tasks: (KV head, chunk of tc tokens), KV-head major. */
typedef struct task {
    int32_t g, t0, rows; /* KV head, first token, query rows (tokens x group) */
} task;

static int32_t tokens_per_task(const sp_att_job *a) { return a->rows_max / (a->n_heads / a->n_kv_heads); }
static int64_t n_tasks(const sp_att_job *a) {
    const int32_t tc = tokens_per_task(a);
    return (int64_t)a->n_kv_heads * ((a->n + tc - 1) / tc);
}
static task task_of(const sp_att_job *a, int64_t w) {
    const int32_t tc = tokens_per_task(a), chunks = (a->n + tc - 1) / tc, G = a->n_heads / a->n_kv_heads;
    task k = {.g = (int32_t)(w / chunks), .t0 = (int32_t)(w % chunks) * tc};
    k.rows = (a->n - k.t0 < tc ? a->n - k.t0 : tc) * G;
    return k;
}
/* Row r of a task (r from r_lo on, for a cut of its rows): token and query head. */
static inline int32_t row_token(const sp_att_job *a, const task *k, int32_t r) {
    return k->t0 + r / (a->n_heads / a->n_kv_heads);
}
static inline int32_t row_head(const sp_att_job *a, const task *k, int32_t r) {
    const int32_t G = a->n_heads / a->n_kv_heads;
    return k->g * G + r % G;
}
/* Slots a row's scores cover: causal rows never see slots after their own. */
static inline int32_t row_slots(const sp_att_job *a, int32_t t) { return a->mask ? a->n_past + a->n : a->n_past + t + 1; }

static inline const float *row_q(const sp_att_job *a, const task *k, int32_t r) {
    return a->q + row_token(a, k, r) * (int64_t)a->n_heads * a->head_dim + (int64_t)row_head(a, k, r) * a->head_dim;
}
/* The queries of a task's rows as the cache's dot type wants them, into
 * QB (rows head_dim * 4 bytes apart; F32 caches read the queries in place). */
static void task_queries(const sp_att_job *a, const task *k, uint8_t *QB) {
    if (a->kv->type_k == SP_GGML_F32) return;
    for (int32_t r = 0; r < k->rows; r++)
        sp_ops_att_query(a->kv->type_k, row_q(a, k, r), a->head_dim, QB + (size_t)r * a->head_dim * 4);
}
/* Task row r's query as task_queries left it. */
static inline const void *row_query(const sp_att_job *a, const task *k, int32_t r, const uint8_t *qb) {
    return a->kv->type_k == SP_GGML_F32 ? (const void *)row_q(a, k, r) : (const void *)qb;
}

/* A row's scores att[0..ns) into probabilities by rank (soft-capping, the
 * window, the mask's compaction into ranks, softmax); returns the ranks. */
static int32_t row_softmax(const sp_att_job *a, const task *k, int32_t r, float *att, int32_t *idx,
                           sp_softmax_fn softmax) {
    const int32_t t = row_token(a, k, r), ns = row_slots(a, t);
    if (a->softcap > 0) /* as ggml: scale by 1/cap, tanh, scale by cap (before masking) */
        for (int32_t s = 0; s < ns; s++) att[s] = tanhf(att[s] * (1.0f / a->softcap)) * a->softcap;
    /* sliding window: the slots before it get -inf in place (weight exactly
     * 0; they keep their lanes, as in ggml, where the mask does this); slots
     * below n_past hold positions equal to their index, newer slots the
     * positions of this batch */
    if (a->window > 0) {
        const int32_t lo = a->pos[t] - a->window + 1;
        for (int32_t s = 0; s < ns; s++)
            if ((s < a->n_past ? s : a->pos[s - a->n_past]) < lo) att[s] = -INFINITY;
    }
    /* a tree mask: the slots it lets the token see, in slot order, become
     * ranks 0..nv-1 (ops.h): for a tree node, its positions */
    int32_t nv = ns;
    if (a->mask) {
        nv = 0;
        for (int32_t s = 0; s < ns; s++)
            if (visible(a, t, s)) {
                idx[nv] = s;
                att[nv++] = att[s];
            }
    }
    if (a->sinks)
        sp_softmax_sink(att, nv, a->sinks[row_head(a, k, r)]);
    else
        softmax(att, nv);
    return nv;
}

/* The mixes of rows [0, rows) of a task (probabilities S, rank maps IDX,
 * ranks NV; row stride n_ctx) over value dims [c0, c0 + w), V block by
 * block (each row takes its ranks whose slots lie in the block), into the
 * output. acc: rows x 16 x w floats. */
static void task_mix(const sp_att_job *a, const task *k, int32_t rows, const float *S, const int32_t *IDX,
                     const int32_t *NV, int32_t c0, int32_t w, float *acc, float *W) {
    const sp_kv *kv = a->kv;
    const int32_t n_ctx = kv->n_ctx, hd = a->head_dim;
    const sp_att_mix_acc_fn mix = sp_ops_att_mix_acc(kv->type_v);
    const sp_att_mix_grp_fn mixg = sp_ops_att_mix_grp();
    const uint8_t *V = sp_kv_v(kv, a->layer, 0) + elem_offset(kv->type_v, (int64_t)k->g * hd + c0);
    int32_t cur[SP_ATT_ROWS_CAP] = {0}, nmax = 0;
    for (int32_t r = 0; r < rows; r++) {
        const int32_t ns = row_slots(a, row_token(a, k, r));
        nmax = ns > nmax ? ns : nmax;
    }
    memset(acc, 0, (size_t)rows * 16 * (size_t)w * sizeof(float));
    if (kv->type_v == SP_GGML_F16 && !a->mask && rows >= WIDE_ROWS && !mixg) {
        /* causal: ranks are slots; the widened rows' ranks start at s0, a
         * multiple of 16, so each keeps its lane */
        const sp_att_widen_fn widen = sp_ops_att_widen();
        const sp_att_mix_acc_fn mixw = sp_ops_att_mix_acc_wide();
        for (int32_t s0 = 0; s0 < nmax; s0 += WIDE_SLOTS) {
            const int32_t cnt = nmax - s0 < WIDE_SLOTS ? nmax - s0 : WIDE_SLOTS;
            widen(V + (size_t)s0 * kv->v_row, kv->v_row, cnt, w, W);
            for (int32_t r = 0; r < rows; r++) {
                const int32_t e = NV[r] < s0 + cnt ? NV[r] : s0 + cnt;
                if (e > s0)
                    mixw(S + (size_t)r * n_ctx + s0, NULL, W, (size_t)w * sizeof(float), 0, e - s0, w,
                         acc + (size_t)r * 16 * w, w);
            }
        }
    } else if (kv->type_v == SP_GGML_F16 && !a->mask && w % 16 == 0 && mixg) {
        /* causal: a token's G rows (query heads) share their ranks, and
         * each value vector is converted once for them */
        const int32_t G = a->n_heads / a->n_kv_heads;
        for (int32_t s0 = 0; s0 < nmax; s0 += SP_ATT_BLOCK)
            for (int32_t r = 0; r < rows; r += G) {
                const int32_t rg = rows - r < G ? rows - r : G;
                const int32_t e = NV[r] < s0 + SP_ATT_BLOCK ? NV[r] : s0 + SP_ATT_BLOCK;
                if (e > cur[r])
                    mixg(S + (size_t)r * n_ctx, (size_t)n_ctx, rg, V, kv->v_row, cur[r], e, w,
                         acc + (size_t)r * 16 * w, (size_t)16 * w, w);
                cur[r] = e;
            }
    } else
    for (int32_t s0 = 0; s0 < nmax; s0 += SP_ATT_BLOCK)
        for (int32_t r = 0; r < rows; r++) {
            const int32_t *idx = a->mask ? IDX + (size_t)r * n_ctx : NULL;
            int32_t e = cur[r];
            if (idx)
                while (e < NV[r] && idx[e] < s0 + SP_ATT_BLOCK) e++;
            else
                e = NV[r] < s0 + SP_ATT_BLOCK ? NV[r] : s0 + SP_ATT_BLOCK;
            if (e > cur[r]) mix(S + (size_t)r * n_ctx, idx, V, kv->v_row, cur[r], e, w, acc + (size_t)r * 16 * w, w);
            cur[r] = e;
        }
    for (int32_t r = 0; r < rows; r++)
        sp_att_mix_finish(acc + (size_t)r * 16 * w, w, w,
                          a->out + row_token(a, k, r) * a->out_stride + (int64_t)row_head(a, k, r) * hd + c0);
}

/* Scores of rows [0, rows) of a task over slots [s0, s1) (each row up to
 * its own last slot). W, QW: the executing thread's widened rows and room
 * for the task's widened queries (rows x hd floats). */
static void task_scores(const sp_att_job *a, const task *k, int32_t rows, const uint8_t *QB, float *S,
                        int32_t s0, int32_t s1, float *W, float *QW) {
    const sp_kv *kv = a->kv;
    const sp_att_scores_kv_fn scores = sp_ops_att_scores_kv(kv->type_k);
    const sp_att_scores_grp_fn scg = sp_ops_att_scores_grp();
    const int32_t hd = a->head_dim;
    const uint8_t *K = sp_kv_kh(kv, a->layer, k->g, 0);
    const size_t ks = sp_kv_k_stride(kv);
    if (kv->type_k == SP_GGML_F16 && hd % 16 == 0 && hd <= WIDE_HD_MAX && rows >= WIDE_ROWS && !scg) {
        const sp_att_widen_fn widen = sp_ops_att_widen();
        const sp_att_scores_wide_fn scw = sp_ops_att_scores_wide();
        int32_t smax = 0;
        for (int32_t r = 0; r < rows; r++) {
            const int32_t ns = row_slots(a, row_token(a, k, r));
            smax = ns > smax ? ns : smax;
        }
        const int32_t end = smax < s1 ? smax : s1;
        for (int32_t r = 0; r < rows; r++) widen(QB + (size_t)r * hd * 4, 0, 1, hd, QW + (size_t)r * hd);
        for (int32_t b0 = s0; b0 < end; b0 += WIDE_SLOTS) {
            const int32_t cnt = end - b0 < WIDE_SLOTS ? end - b0 : WIDE_SLOTS;
            widen(K + (size_t)b0 * ks, ks, cnt, hd, W);
            for (int32_t r = 0; r < rows; r++) {
                const int32_t ns = row_slots(a, row_token(a, k, r)), e = ns < b0 + cnt ? ns : b0 + cnt;
                if (e <= b0) continue;
                scw(QW + (size_t)r * hd, W, e - b0, hd, a->scale, S + (size_t)r * kv->n_ctx + b0);
            }
        }
        return;
    }
    if (kv->type_k == SP_GGML_F16 && hd % 16 == 0 && scg) {
        /* a token's G rows (query heads) read the same slots: each key
         * vector converted once for them */
        const int32_t G = a->n_heads / a->n_kv_heads;
        for (int32_t b0 = s0; b0 < s1; b0 += SP_ATT_BLOCK)
            for (int32_t r = 0; r < rows; r += G) {
                const int32_t ns = row_slots(a, row_token(a, k, r)), e = ns < s1 ? ns : s1;
                if (b0 >= e) continue;
                const int32_t cnt = e - b0 < SP_ATT_BLOCK ? e - b0 : SP_ATT_BLOCK;
                scg(QB + (size_t)r * hd * 4, (size_t)hd * 4, rows - r < G ? rows - r : G, K + (size_t)b0 * ks, ks,
                    cnt, hd, a->scale, S + (size_t)r * kv->n_ctx + b0, (size_t)kv->n_ctx);
            }
        return;
    }
    for (int32_t b0 = s0; b0 < s1; b0 += SP_ATT_BLOCK)
        for (int32_t r = 0; r < rows; r++) {
            const int32_t ns = row_slots(a, row_token(a, k, r)), e = ns < s1 ? ns : s1;
            if (b0 >= e) continue;
            const int32_t cnt = e - b0 < SP_ATT_BLOCK ? e - b0 : SP_ATT_BLOCK;
            scores(row_query(a, k, r, QB + (size_t)r * a->head_dim * 4), K + (size_t)b0 * ks, ks, cnt, a->head_dim, a->scale,
                   S + (size_t)r * kv->n_ctx + b0);
        }
}

void sp_att_job_run(void *arg, int ith, int nth) {
    const sp_att_job *a = arg;
    const int32_t hd = a->head_dim, n_ctx = a->kv->n_ctx;
    const scratch sc = scratch_of(a, ith);
    const sp_softmax_fn softmax = sp_ops_softmax();
    const int64_t tasks = n_tasks(a);
    for (int64_t w = tasks * ith / nth; w < tasks * (ith + 1) / nth; w++) {
        const task k = task_of(a, w);
        task_queries(a, &k, sc.QB);
        task_scores(a, &k, k.rows, sc.QB, sc.S, 0, a->n_past + a->n, sc.W, sc.ACC);
        for (int32_t r = 0; r < k.rows; r++)
            sc.NV[r] = row_softmax(a, &k, r, sc.S + (size_t)r * n_ctx, sc.IDX + (size_t)r * n_ctx, softmax);
        task_mix(a, &k, k.rows, sc.S, sc.IDX, sc.NV, 0, hd, sc.ACC, sc.W);
    }
}

/* ---- the split: fewer tasks than threads ----
 * Task w keeps its scores, rank maps and queries in thread w's scratch;
 * every phase cuts its items evenly over the threads. */
typedef struct split {
    const sp_att_job *a;
    int32_t tasks, nblk;   /* tasks (< threads); slot blocks of SP_ATT_BLOCK */
    int32_t ncol, unit;    /* value-dim pieces of the mix, cut at multiples of unit */
} split;

static void split_scores(void *arg, int ith, int nth) {
    const split *sp = arg;
    const sp_att_job *a = sp->a;
    const int64_t items = (int64_t)sp->tasks * sp->nblk;
    for (int64_t it = items * ith / nth; it < items * (ith + 1) / nth; it++) {
        const int32_t w = (int32_t)(it / sp->nblk), b = (int32_t)(it % sp->nblk);
        const task k = task_of(a, w);
        const int32_t s0 = b * SP_ATT_BLOCK, end = a->n_past + a->n;
        const scratch sc = scratch_of(a, w), own = scratch_of(a, ith);
        /* the executing thread's accumulators are free until the mix phase */
        task_scores(a, &k, k.rows, sc.QB, sc.S, s0, s0 + SP_ATT_BLOCK < end ? s0 + SP_ATT_BLOCK : end, own.W,
                    own.ACC);
    }
}

static void split_softmax(void *arg, int ith, int nth) {
    const split *sp = arg;
    const sp_att_job *a = sp->a;
    const sp_softmax_fn softmax = sp_ops_softmax();
    int64_t items = 0;
    for (int32_t w = 0; w < sp->tasks; w++) items += task_of(a, w).rows;
    const int64_t lo = items * ith / nth, hi = items * (ith + 1) / nth;
    int64_t base = 0;
    for (int32_t w = 0; w < sp->tasks; w++) {
        const task k = task_of(a, w);
        const scratch sc = scratch_of(a, w);
        for (int32_t r = 0; r < k.rows; r++)
            if (base + r >= lo && base + r < hi)
                sc.NV[r] = row_softmax(a, &k, r, sc.S + (size_t)r * a->kv->n_ctx, sc.IDX + (size_t)r * a->kv->n_ctx,
                                       softmax);
        base += k.rows;
    }
}

static void split_mix(void *arg, int ith, int nth) {
    const split *sp = arg;
    const sp_att_job *a = sp->a;
    const int32_t units = (a->head_dim + sp->unit - 1) / sp->unit;
    const int64_t items = (int64_t)sp->tasks * sp->ncol;
    const scratch own = scratch_of(a, ith);
    for (int64_t it = items * ith / nth; it < items * (ith + 1) / nth; it++) {
        const int32_t w = (int32_t)(it / sp->ncol), c = (int32_t)(it % sp->ncol);
        const int32_t c0 = units * c / sp->ncol * sp->unit, c1 = units * (c + 1) / sp->ncol * sp->unit;
        const int32_t cw = (c1 < a->head_dim ? c1 : a->head_dim) - c0;
        if (cw <= 0) continue;
        const task k = task_of(a, w);
        const scratch sc = scratch_of(a, w);
        task_mix(a, &k, k.rows, sc.S, sc.IDX, sc.NV, c0, cw, own.ACC, own.W);
    }
}

void sp_att_run(sp_att_job *a, sp_pool *pool) {
    const int nth = sp_pool_n_threads(pool);
    const int64_t tasks = n_tasks(a);
    if (nth <= 1 || tasks >= nth) {
        sp_pool_run(pool, sp_att_job_run, a);
        return;
    }
    /* the queries first (each task's in its own scratch), then three jobs */
    split sp = {.a = a, .tasks = (int32_t)tasks, .nblk = (a->n_past + a->n + SP_ATT_BLOCK - 1) / SP_ATT_BLOCK,
                .unit = a->kv->type_v == SP_GGML_Q8_0 ? 32 : 16};
    const int32_t units = (a->head_dim + sp.unit - 1) / sp.unit, want = (int32_t)((nth + tasks - 1) / tasks);
    sp.ncol = want < units ? want : units;
    for (int32_t w = 0; w < sp.tasks; w++) {
        const task k = task_of(a, w);
        task_queries(a, &k, scratch_of(a, w).QB);
    }
    sp_pool_run(pool, split_scores, &sp);
    sp_pool_run(pool, split_softmax, &sp);
    sp_pool_run(pool, split_mix, &sp);
}
