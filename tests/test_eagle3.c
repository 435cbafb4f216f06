/* Tests for EAGLE-3 heads (sp_model.h, src/engine/eagle3.c) and the
 * eagle3 drafter: random heads written here in llama.cpp's layout load
 * against their target and compute what a plain double-precision
 * re-implementation of the head (from the file's weights) computes;
 * speculative decoding with them gives plain decoding's tokens at T = 0
 * and the target's distribution at T = 1 (chi-square); bad heads and
 * settings are refused with one clear message. The comparison with
 * llama.cpp's drafts is test_eagle3_llamacpp.c. */
#include "testutil.h"
#include "spec_testutil.h"

#include <math.h>

#include "eagle3.h"
#include "gguf_write.h"
#include "model_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define SP_SLOW 1
#else
#define SP_SLOW 0
#endif

/* ------------------------------------------------------------ head files */

typedef struct head_opts {
    int32_t dim, heads, kv_heads, ffn; /* 0: the target's */
    int32_t layers[3];
    int32_t draft_vocab;               /* > 0: a d2t map of this many ids */
    bool own_embd, no_output, nbr, nbf;
    bool copy_last;                    /* fc copies the third tap (g = that tap); the other
                                        * matrices scaled by gain */
    float gain;
    uint64_t seed;
    /* broken variants */
    const char *arch;                  /* NULL: eagle3 */
    int32_t tgt_dim;                   /* 0: the target's */
    bool d2t_dup;                      /* two draft ids on one target id */
    int32_t n_layers_listed;           /* 0: 3 */
} head_opts;

static void add_f32(sp_gguf_writer *w, const char *name, int64_t cols, int64_t rows, const float *x) {
    sp_error err = {0};
    const int64_t ne[2] = {cols, rows};
    if (sp_gguf_writer_add_tensor(w, name, SP_GGML_F32, rows > 1 ? 2 : 1, ne, x, false, &err))
        fail_msg("add %s: %s", name, err.msg);
}

static void add_rand(sp_gguf_writer *w, sp_rng *r, const char *name, int64_t cols, int64_t rows, float gain) {
    float *x = malloc((size_t)(cols * rows) * sizeof *x);
    for (int64_t i = 0; i < cols * rows; i++) x[i] = (float)(sp_rng_normal(r) * gain / sqrt((double)cols));
    add_f32(w, name, cols, rows, x);
    free(x);
}

static void add_norm(sp_gguf_writer *w, sp_rng *r, const char *name, int64_t n) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(1.0 + 0.1 * sp_rng_normal(r));
    add_f32(w, name, n, 1, x);
    free(x);
}

/* Writes a random head for the target file tpath (whose model is tm). */
static void write_head(const char *path, const char *tpath, const sp_model *tm, const head_opts *o) {
    const sp_model_config *tc = sp_model_cfg(tm);
    const int32_t dim = o->dim ? o->dim : tc->dim, heads = o->heads ? o->heads : tc->n_heads;
    const int32_t kvh = o->kv_heads ? o->kv_heads : tc->n_kv_heads, ffn = o->ffn ? o->ffn : tc->ffn_dim;
    const int32_t hd = dim / heads, V = tc->n_vocab, td = o->tgt_dim ? o->tgt_dim : tc->dim;
    const int32_t Vd = o->draft_vocab ? o->draft_vocab : V;
    sp_rng r;
    sp_rng_seed(&r, o->seed);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_set_str(w, "general.architecture", o->arch ? o->arch : "eagle3");
    sp_gguf_writer_set_u32(w, "eagle3.context_length", 2048);
    sp_gguf_writer_set_u32(w, "eagle3.embedding_length", (uint32_t)dim);
    sp_gguf_writer_set_u32(w, "eagle3.feed_forward_length", (uint32_t)ffn);
    sp_gguf_writer_set_u32(w, "eagle3.block_count", 1);
    sp_gguf_writer_set_u32(w, "eagle3.attention.head_count", (uint32_t)heads);
    sp_gguf_writer_set_u32(w, "eagle3.attention.head_count_kv", (uint32_t)kvh);
    sp_gguf_writer_set_f32(w, "eagle3.rope.freq_base", 10000.0f);
    sp_gguf_writer_set_f32(w, "eagle3.attention.layer_norm_rms_epsilon", 1e-5f);
    sp_gguf_writer_set_u32(w, "eagle3.rope.dimension_count", (uint32_t)hd);
    sp_gguf_writer_set_arr_i32(w, "eagle3.target_layers", o->layers,
                               (uint64_t)(o->n_layers_listed ? o->n_layers_listed : 3));
    sp_gguf_writer_set_u32(w, "eagle3.target_hidden_size", (uint32_t)td);
    sp_gguf_writer_set_bool(w, "eagle3.norm_before_residual", o->nbr);
    sp_gguf_writer_set_bool(w, "eagle3.norm_before_fc", o->nbf);
    sp_gguf *tg = NULL;
    sp_error err = {0};
    if (sp_gguf_open(tpath, &tg, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer_copy_kv(w, tg, "tokenizer.");
    const float gain = o->gain > 0 ? o->gain : 1.0f;
    if (o->own_embd) add_rand(w, &r, "token_embd.weight", dim, V, 8.0f * gain);
    if (o->copy_last) {
        float *fc = calloc((size_t)3 * td * dim, sizeof *fc);
        for (int32_t i = 0; i < dim && i < td; i++) fc[(int64_t)i * 3 * td + 2 * td + i] = 1.0f;
        add_f32(w, "fc.weight", 3 * (int64_t)td, dim, fc);
        free(fc);
    } else {
        add_rand(w, &r, "fc.weight", 3 * (int64_t)td, dim, gain);
    }
    if (o->nbf) add_norm(w, &r, "enc.output_norm.weight", 3 * (int64_t)td);
    add_norm(w, &r, "output_norm.weight", dim);
    if (!o->no_output) add_rand(w, &r, "output.weight", dim, Vd, 2.0f * gain);
    add_norm(w, &r, "blk.0.attn_norm.weight", dim);
    add_norm(w, &r, "blk.0.attn_norm_2.weight", dim);
    add_rand(w, &r, "blk.0.attn_q.weight", 2 * (int64_t)dim, (int64_t)heads * hd, gain);
    add_rand(w, &r, "blk.0.attn_k.weight", 2 * (int64_t)dim, (int64_t)kvh * hd, gain);
    add_rand(w, &r, "blk.0.attn_v.weight", 2 * (int64_t)dim, (int64_t)kvh * hd, gain);
    add_rand(w, &r, "blk.0.attn_output.weight", (int64_t)heads * hd, dim, gain);
    add_norm(w, &r, "blk.0.ffn_norm.weight", dim);
    add_rand(w, &r, "blk.0.ffn_gate.weight", dim, ffn, gain);
    add_rand(w, &r, "blk.0.ffn_up.weight", dim, ffn, gain);
    add_rand(w, &r, "blk.0.ffn_down.weight", ffn, dim, gain);
    if (o->draft_vocab) { /* distinct target ids as absolute ids (the converter's form) */
        int64_t *ids = malloc((size_t)Vd * sizeof *ids);
        for (int32_t i = 0; i < Vd; i++) ids[i] = (1 + 3 * (int64_t)i) % V;
        if (o->d2t_dup) ids[Vd - 1] = ids[0];
        const int64_t ne[1] = {Vd};
        if (sp_gguf_writer_add_tensor(w, "d2t", SP_GGML_I64, 1, ne, ids, false, &err)) fail_msg("%s", err.msg);
        free(ids);
    }
    if (sp_gguf_writer_write(w, path, &err)) fail_msg("write head: %s", err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(tg);
}

static const char *scratch(const char *name) {
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", sp_tmpdir(), name);
    return b;
}

static sp_eagle3 *load_head(const char *path, const sp_model *tm) {
    sp_error err = {0};
    sp_eagle3 *h = NULL;
    if (sp_eagle3_load(path, tm, &h, &err)) fail_msg("load head %s: %s", path, err.msg);
    return h;
}

/* -------------------------------------------- reference implementation */

/* The head's weights read back from the file (F32), in double. */
typedef struct ref_head {
    int32_t dim, heads, kvh, hd, ffn, td, V, Vd;
    double eps, theta;
    bool nbr, nbf;
    const float *fc, *enc_norm, *out_norm, *output, *attn_norm, *hnorm, *wq, *wk, *wv, *wo, *ffn_norm, *w1,
        *w2, *w3, *embd;
    int64_t *d2t;
    sp_gguf *g;
} ref_head;

static const float *tensor(sp_gguf *g, const char *name) {
    const sp_gguf_tensor *t = sp_gguf_find_tensor(g, name);
    return t ? (const float *)t->data : NULL;
}

static void ref_open(ref_head *r, const char *path, const sp_model *tm) {
    sp_error err = {0};
    memset(r, 0, sizeof *r);
    if (sp_gguf_open(path, &r->g, &err)) fail_msg("%s", err.msg);
    uint32_t u;
    float f;
    sp_gguf_get_u32(r->g, "eagle3.embedding_length", &u, &err), r->dim = (int32_t)u;
    sp_gguf_get_u32(r->g, "eagle3.attention.head_count", &u, &err), r->heads = (int32_t)u;
    sp_gguf_get_u32(r->g, "eagle3.attention.head_count_kv", &u, &err), r->kvh = (int32_t)u;
    sp_gguf_get_u32(r->g, "eagle3.feed_forward_length", &u, &err), r->ffn = (int32_t)u;
    sp_gguf_get_u32(r->g, "eagle3.target_hidden_size", &u, &err), r->td = (int32_t)u;
    sp_gguf_get_f32(r->g, "eagle3.attention.layer_norm_rms_epsilon", &f, &err), r->eps = f;
    sp_gguf_get_f32(r->g, "eagle3.rope.freq_base", &f, &err), r->theta = f;
    r->nbr = sp_gguf_find(r->g, "eagle3.norm_before_residual")->v.b;
    r->nbf = sp_gguf_find(r->g, "eagle3.norm_before_fc")->v.b;
    r->hd = r->dim / r->heads;
    r->V = sp_model_cfg(tm)->n_vocab;
    r->fc = tensor(r->g, "fc.weight");
    r->enc_norm = tensor(r->g, "enc.output_norm.weight");
    r->out_norm = tensor(r->g, "output_norm.weight");
    r->output = tensor(r->g, "output.weight");
    r->attn_norm = tensor(r->g, "blk.0.attn_norm.weight");
    r->hnorm = tensor(r->g, "blk.0.attn_norm_2.weight");
    r->wq = tensor(r->g, "blk.0.attn_q.weight");
    r->wk = tensor(r->g, "blk.0.attn_k.weight");
    r->wv = tensor(r->g, "blk.0.attn_v.weight");
    r->wo = tensor(r->g, "blk.0.attn_output.weight");
    r->ffn_norm = tensor(r->g, "blk.0.ffn_norm.weight");
    r->w1 = tensor(r->g, "blk.0.ffn_gate.weight");
    r->w2 = tensor(r->g, "blk.0.ffn_down.weight");
    r->w3 = tensor(r->g, "blk.0.ffn_up.weight");
    r->embd = tensor(r->g, "token_embd.weight");
    const sp_gguf_tensor *d = sp_gguf_find_tensor(r->g, "d2t");
    r->Vd = d ? (int32_t)d->ne[0] : r->V;
    if (d) {
        r->d2t = malloc((size_t)r->Vd * sizeof *r->d2t);
        memcpy(r->d2t, d->data, (size_t)r->Vd * 8);
    }
}

static void ref_close(ref_head *r) {
    free(r->d2t);
    sp_gguf_close(r->g);
}

static void rms(double *o, const double *x, const float *w, int64_t n, double eps) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    const double k = 1.0 / sqrt(s / (double)n + eps);
    for (int64_t i = 0; i < n; i++) o[i] = x[i] * k * w[i];
}

static void mv(double *y, const float *w, const double *x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * x[c];
        y[r] = s;
    }
}

/* llama-style RoPE on adjacent pairs of each head. */
static void rope(double *x, int32_t nh, int32_t hd, int32_t pos, double theta) {
    for (int32_t h = 0; h < nh; h++)
        for (int32_t i = 0; i < hd / 2; i++) {
            const double a = pos * pow(theta, -2.0 * i / hd), c = cos(a), s = sin(a);
            double *p = x + (int64_t)h * hd + 2 * i;
            const double x0 = p[0], x1 = p[1];
            p[0] = x0 * c - x1 * s;
            p[1] = x0 * s + x1 * c;
        }
}

/* The head over n pairs (tok[t], g[t]) at positions 0..n-1 from an empty
 * cache; logits of every row (V wide, -inf outside the draft vocabulary)
 * and the pre-norm outputs. */
static void ref_decode(const ref_head *r, const sp_model *tm, const int32_t *tok, const double *g, int32_t n,
                       double *logits, double *prenorm) {
    const int32_t D = r->dim, hd = r->hd, qd = r->heads * hd, kd = r->kvh * hd;
    double *K = malloc((size_t)n * kd * 8), *Vv = malloc((size_t)n * kd * 8);
    double *cat = malloc((size_t)2 * D * 8), *x = malloc((size_t)D * 8), *q = malloc((size_t)qd * 8);
    double *att = malloc((size_t)qd * 8), *o = malloc((size_t)D * 8), *xb = malloc((size_t)D * 8);
    double *a = malloc((size_t)r->ffn * 8), *b = malloc((size_t)r->ffn * 8), *lg = malloc((size_t)r->Vd * 8);
    float *e = malloc((size_t)D * 4);
    for (int32_t t = 0; t < n; t++) {
        if (r->embd) memcpy(e, r->embd + (int64_t)tok[t] * D, (size_t)D * 4);
        else /* the target's embedding row */
            sp_dequantize_row(tm->tok_embd.type, tm->tok_embd.data + (size_t)tok[t] * tm->tok_embd.row_bytes, e, D);
        double ed[4096];
        for (int32_t i = 0; i < D; i++) ed[i] = e[i];
        rms(cat, ed, r->attn_norm, D, r->eps);
        rms(cat + D, g + (int64_t)t * D, r->hnorm, D, r->eps);
        for (int32_t i = 0; i < D; i++) x[i] = r->nbr ? cat[D + i] : g[(int64_t)t * D + i];
        mv(q, r->wq, cat, qd, 2 * D);
        mv(K + (int64_t)t * kd, r->wk, cat, kd, 2 * D);
        mv(Vv + (int64_t)t * kd, r->wv, cat, kd, 2 * D);
        rope(q, r->heads, hd, t, r->theta);
        rope(K + (int64_t)t * kd, r->kvh, hd, t, r->theta);
        for (int32_t h = 0; h < r->heads; h++) {
            const int32_t kh = h / (r->heads / r->kvh);
            double sc[256], mx = -INFINITY, sum = 0;
            for (int32_t s = 0; s <= t; s++) {
                double d = 0;
                for (int32_t i = 0; i < hd; i++) d += q[h * hd + i] * K[(int64_t)s * kd + kh * hd + i];
                sc[s] = d / sqrt((double)hd);
                mx = sc[s] > mx ? sc[s] : mx;
            }
            for (int32_t s = 0; s <= t; s++) sum += sc[s] = exp(sc[s] - mx);
            for (int32_t i = 0; i < hd; i++) {
                double v = 0;
                for (int32_t s = 0; s <= t; s++) v += sc[s] / sum * Vv[(int64_t)s * kd + kh * hd + i];
                att[h * hd + i] = v;
            }
        }
        mv(o, r->wo, att, D, qd);
        for (int32_t i = 0; i < D; i++) x[i] += o[i];
        rms(xb, x, r->ffn_norm, D, r->eps);
        mv(a, r->w1, xb, r->ffn, D);
        mv(b, r->w3, xb, r->ffn, D);
        for (int32_t i = 0; i < r->ffn; i++) a[i] = a[i] / (1 + exp(-a[i])) * b[i];
        mv(o, r->w2, a, D, r->ffn);
        for (int32_t i = 0; i < D; i++) x[i] += o[i];
        memcpy(prenorm + (int64_t)t * D, x, (size_t)D * 8);
        rms(xb, x, r->out_norm, D, r->eps);
        if (r->output) {
            mv(lg, r->output, xb, r->Vd, D);
        } else { /* the target's output rows */
            for (int32_t v = 0; v < r->Vd; v++) {
                sp_dequantize_row(tm->output.type, tm->output.data + (size_t)v * tm->output.row_bytes, e, D);
                double sdot = 0;
                for (int32_t i = 0; i < D; i++) sdot += (double)e[i] * xb[i];
                lg[v] = sdot;
            }
        }
        double *L = logits + (int64_t)t * r->V;
        for (int32_t v = 0; v < r->V; v++) L[v] = r->d2t ? -INFINITY : lg[v];
        if (r->d2t)
            for (int32_t i = 0; i < r->Vd; i++) L[r->d2t[i]] = lg[i];
    }
    free(K), free(Vv), free(cat), free(x), free(q), free(att), free(o), free(xb), free(a), free(b), free(lg);
    free(e);
}

/* The head's encoder and decoder against the reference, on taps of a real
 * target forward: every g and logit within 1e-4 (relative), ids outside
 * the draft vocabulary -inf, pre-norm outputs too; with both norm options. */
static void check_against_reference(const char *tpath, head_opts o) {
    sp_model *tm = load(sp_shared(tpath));
    const char *hp = scratch("ref_head.gguf");
    write_head(hp, sp_shared(tpath), tm, &o);
    sp_eagle3 *h = load_head(hp, tm);
    ref_head r;
    ref_open(&r, hp, tm);
    sp_error err = {0};
    sp_ctx *t = NULL;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 64;
    assert_int_equal(sp_ctx_init(tm, &cp, &t, &err), SP_OK);
    assert_int_equal(sp_ctx_set_taps(t, sp_eagle3_target_layers(h), 3, &err), SP_OK);
    const int32_t tok[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
    const int32_t n = 10, V = r.V, D = r.dim, td = r.td;
    float *lg = malloc((size_t)n * V * 4);
    sp_batch b = {.tokens = tok, .n = n, .logits_all = true};
    assert_int_equal(sp_forward(t, &b, lg, &err), SP_OK);
    const float *taps[3];
    for (int i = 0; i < 3; i++) taps[i] = sp_ctx_taps(t, i, NULL);
    sp_eagle3_ctx *ec = NULL;
    assert_int_equal(sp_eagle3_ctx_init(h, 64, 16, NULL, &ec, &err), SP_OK);
    float *g = malloc((size_t)n * D * 4), *pre = malloc((size_t)n * D * 4), *el = malloc((size_t)n * V * 4);
    assert_int_equal(sp_eagle3_encode(ec, taps, n, g, &err), SP_OK);
    double *gd = malloc((size_t)n * D * 8), *feat = malloc((size_t)3 * td * 8), *fn = malloc((size_t)3 * td * 8);
    double worst = 0;
    for (int32_t t2 = 0; t2 < n; t2++) {
        for (int i = 0; i < 3; i++)
            for (int32_t j = 0; j < td; j++) feat[i * td + j] = taps[i][(int64_t)t2 * td + j];
        if (r.nbf) rms(fn, feat, r.enc_norm, 3 * td, r.eps);
        mv(gd + (int64_t)t2 * D, r.fc, r.nbf ? fn : feat, D, 3 * td);
        for (int32_t j = 0; j < D; j++) {
            double d = fabs(gd[(int64_t)t2 * D + j] - g[(int64_t)t2 * D + j]) / (1 + fabs(gd[(int64_t)t2 * D + j]));
            worst = d > worst ? d : worst;
        }
    }
    if (worst > 1e-4) fail_msg("%s: encoder differs from the reference by %g", tpath, worst);
    /* the reference decodes from Specula's g, so the decoder is checked alone */
    for (int64_t i = 0; i < (int64_t)n * D; i++) gd[i] = g[i];
    double *rl = malloc((size_t)n * V * 8), *rp = malloc((size_t)n * D * 8);
    ref_decode(&r, tm, tok + 1, gd, n - 1, rl, rp);
    /* in two calls (4 + 5 pairs): the cache carries the first call's pairs */
    assert_int_equal(sp_eagle3_decode(ec, tok + 1, g, 4, true, el, pre, &err), SP_OK);
    assert_int_equal(sp_eagle3_decode(ec, tok + 5, g + 4 * D, 5, true, el + 4 * V, pre + 4 * D, &err), SP_OK);
    assert_int_equal(sp_eagle3_ctx_n_past(ec), 9);
    worst = 0;
    for (int64_t i = 0; i < (int64_t)(n - 1) * V; i++) {
        if (isinf(rl[i])) {
            if (!(isinf(el[i]) && el[i] < 0)) fail_msg("%s: logit %lld should be -inf", tpath, (long long)i);
            continue;
        }
        double d = fabs(rl[i] - el[i]) / (1 + fabs(rl[i]));
        worst = d > worst ? d : worst;
    }
    for (int64_t i = 0; i < (int64_t)(n - 1) * D; i++) {
        double d = fabs(rp[i] - pre[i]) / (1 + fabs(rp[i]));
        worst = d > worst ? d : worst;
    }
    if (worst > 1e-4) fail_msg("%s: decoder differs from the reference by %g", tpath, worst);
    /* the last row alone (all = false) and after a truncation: the same bits */
    float *one = malloc((size_t)V * 4), *pone = malloc((size_t)D * 4);
    assert_int_equal(sp_eagle3_ctx_truncate(ec, 8, &err), SP_OK);
    assert_int_equal(sp_eagle3_decode(ec, tok + 9, g + 8 * D, 1, false, one, pone, &err), SP_OK);
    assert_memory_equal(one, el + 8 * V, (size_t)V * 4);
    assert_memory_equal(pone, pre + 8 * D, (size_t)D * 4);
    free(one), free(pone), free(rl), free(rp), free(gd), free(feat), free(fn), free(g), free(pre), free(el), free(lg);
    sp_eagle3_ctx_free(ec);
    sp_ctx_free(t);
    ref_close(&r);
    sp_eagle3_free(h);
    sp_model_free(tm);
}

static void test_forward_matches_reference(void **state) {
    (void)state;
    check_against_reference("models/stories260K.gguf",
                            (head_opts){.layers = {1, 2, 5}, .draft_vocab = 200, .own_embd = true, .seed = 3});
    check_against_reference("models/stories260K.gguf",
                            (head_opts){.layers = {0, 4, 3}, .no_output = true, .seed = 5});
    check_against_reference("reference/arch/models/llama-gqa4-f32.gguf",
                            (head_opts){.layers = {0, 1, 1}, .dim = 96, .heads = 6, .kv_heads = 3, .ffn = 80,
                                        .own_embd = true, .nbr = true, .nbf = true, .seed = 4});
}

/* ------------------------------------------------------------ speculation */

static sp_ctx *mkctx(const sp_model *m, int32_t n_ctx, int32_t threads) {
    sp_error err = {0};
    sp_ctx *c = NULL;
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = n_ctx;
    p.max_batch = 64;
    p.n_threads = threads;
    if (sp_ctx_init(m, &p, &c, &err)) fail_msg("ctx: %s", err.msg);
    return c;
}

/* Greedy speculative decoding with the head gives plain decoding's tokens:
 * gamma 1, 3, 6, adaptive, p_min stops; a prompt longer than the target's
 * batch (its rows arrive in chunks); two threads; a second prompt on the
 * same object (sp_spec_reset). */
static void greedy_case(sp_model *tm, const sp_eagle3 *h, const char *cfg, int32_t threads,
                        const int32_t *prompt, int32_t np, int32_t n_gen, double *acc) {
    sp_error err = {0};
    sp_ctx *pc = mkctx(tm, 512, 1), *t = mkctx(tm, 512, threads);
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = n_gen;
    gp.sampling.temperature = 0;
    gp.stop_at_eog = false;
    int32_t *want = malloc((size_t)n_gen * 4), *got = malloc((size_t)n_gen * 4);
    sp_gen_stats gs;
    if (sp_generate(pc, prompt, np, &gp, want, n_gen, &gs, NULL, NULL, &err)) fail_msg("plain: %s", err.msg);
    sp_spec_params sp = parse_ok(cfg, true);
    sp.draft.eagle3 = h;
    sp_spec *s = NULL;
    if (sp_spec_init(t, &sp, &s, &err)) fail_msg("spec init (%s): %s", cfg, err.msg);
    for (int round = 0; round < 2; round++) {
        sp_spec_stats st;
        assert_int_equal(sp_spec_reset(s, &err), SP_OK);
        if (sp_spec_generate(s, prompt, np, &gp, got, n_gen, NULL, &st, NULL, NULL, &err))
            fail_msg("spec (%s): %s", cfg, err.msg);
        for (int32_t i = 0; i < n_gen; i++)
            if (got[i] != want[i])
                fail_msg("%s, round %d: token %d is %d, plain decoding gives %d", cfg, round, i, got[i], want[i]);
        /* (a second prompt may decode plainly: adaptive, with carried costs) */
        if (round == 0 && (st.drafted == 0 || st.draft_forwards == 0)) fail_msg("%s: nothing drafted", cfg);
        if (acc) *acc = sp_spec_acceptance_rate(&st);
    }
    sp_spec_free(s);
    sp_ctx_free(t);
    sp_ctx_free(pc);
    free(want);
    free(got);
}

static void test_greedy_equals_plain(void **state) {
    (void)state;
    sp_model *tm = load(sp_shared("models/stories260K.gguf"));
    const char *hp = scratch("greedy_head.gguf");
    write_head(hp, sp_shared("models/stories260K.gguf"), tm,
               &(head_opts){.layers = {1, 2, 4}, .draft_vocab = 256, .ffn = 96, .seed = 7});
    sp_eagle3 *h = load_head(hp, tm);
    const int32_t prompt[] = {1, 403, 407, 261, 378};
    int32_t longp[150];
    for (int i = 0; i < 150; i++) longp[i] = i ? 3 + (int32_t)((i * 37) % 500) : 1;
    const int32_t n = SP_SLOW ? 24 : 64;
    const char *cfgs[] = {"drafter=eagle3,gamma=1", "drafter=eagle3,gamma=3", "drafter=eagle3,gamma=6",
                          "drafter=eagle3", "drafter=eagle3,gamma=5,p_min=0.3,n_min=0",
                          "drafter=eagle3,gamma=4,verifier=greedy", "drafter=eagle3,tree=3x2x1",
                          "drafter=eagle3,tree=2x2x2x1,verifier=greedy", "drafter=eagle3,tree=dyn:3:4:10",
                          "drafter=eagle3,tree=dyn:4:6:16,verifier=greedy"};
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) greedy_case(tm, h, cfgs[i], 1, prompt, 5, n, NULL);
    greedy_case(tm, h, "drafter=eagle3,gamma=4", 2, longp, 150, n, NULL);
    greedy_case(tm, h, "drafter=eagle3,gamma=2", 1, prompt, 1, n, NULL); /* a one-token prompt */
    sp_eagle3_free(h);
    sp_model_free(tm);
}

/* Tiny target (V = 8): the first K tokens' joint distribution at T = 1
 * under speculation with the head equals the target's exact one
 * (chi-square, p >= 1e-4), for the block and token verifiers, with a draft
 * vocabulary map and with the target's embeddings and output. */
enum { K = 3 };

static void exact_dist(sp_model *m, const int32_t *prompt, int32_t np, double *dist) {
    const int32_t V = sp_model_cfg(m)->n_vocab;
    sp_ctx *c = mkctx(m, 64, 1);
    sp_sampler *s;
    sp_error err = {0};
    sp_sampler_params spp = sp_sampler_default_params();
    assert_int_equal(sp_sampler_init(&spp, V, &s, &err), SP_OK);
    float *lg = malloc((size_t)V * 4), *p1 = malloc((size_t)V * 4), *p2 = malloc((size_t)V * 4),
          *p3 = malloc((size_t)V * 4);
    sp_batch b = {.tokens = prompt, .n = np};
    assert_int_equal(sp_forward(c, &b, lg, &err), SP_OK);
    sp_sampler_probs(s, lg, p1);
    for (int32_t a = 0; a < V; a++) {
        sp_ctx_truncate(c, np, &err);
        b = (sp_batch){.tokens = &a, .n = 1};
        assert_int_equal(sp_forward(c, &b, lg, &err), SP_OK);
        sp_sampler_probs(s, lg, p2);
        for (int32_t bb = 0; bb < V; bb++) {
            sp_ctx_truncate(c, np + 1, &err);
            sp_batch b2 = {.tokens = &bb, .n = 1};
            assert_int_equal(sp_forward(c, &b2, lg, &err), SP_OK);
            sp_sampler_probs(s, lg, p3);
            for (int32_t cc = 0; cc < V; cc++)
                dist[((int64_t)a * V + bb) * V + cc] = (double)p1[a] * p2[bb] * p3[cc];
        }
    }
    free(lg), free(p1), free(p2), free(p3);
    sp_sampler_free(s);
    sp_ctx_free(c);
}

static void distribution_case(sp_model *tm, const sp_eagle3 *h, const char *cfg, const double *dist, long runs) {
    const int32_t V = sp_model_cfg(tm)->n_vocab;
    const int32_t prompt[] = {1, 5, 6, 5, 6, 5};
    const int64_t cells = (int64_t)V * V * V;
    int64_t *cnt = calloc((size_t)cells, sizeof *cnt);
    sp_ctx *t = mkctx(tm, 64, 1);
    sp_spec_params sp = parse_ok(cfg, true);
    sp.draft.eagle3 = h;
    sp_error err = {0};
    sp_spec *s = NULL;
    if (sp_spec_init(t, &sp, &s, &err)) fail_msg("spec init: %s", err.msg);
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = K;
    gp.stop_at_eog = false;
    sp_spec_stats st, tot = {0};
    for (long r = 0; r < runs; r++) {
        int32_t out[K];
        gp.seed = 5000 + (uint64_t)r;
        assert_int_equal(sp_spec_reset(s, &err), SP_OK);
        if (sp_spec_generate(s, prompt, 6, &gp, out, K, NULL, &st, NULL, NULL, &err))
            fail_msg("generate: %s", err.msg);
        cnt[((int64_t)out[0] * V + out[1]) * V + out[2]]++;
        tot.drafted += st.drafted;
        tot.accepted += st.accepted;
    }
    sp_vsim_chi2 c2;
    sp_vsim_chi2_test(cnt, dist, cells, &c2);
    assert_int_equal(c2.impossible, 0);
    if (c2.p_value < 1e-4) fail_msg("%s: chi2 %.1f dof %d p %.2g", cfg, c2.chi2, c2.dof, c2.p_value);
    /* speculation ran: drafts were made, some accepted and some rejected */
    assert_true(tot.drafted > 0);
    assert_true(tot.accepted > 0);
    assert_true(tot.accepted < tot.drafted);
    sp_spec_free(s);
    sp_ctx_free(t);
    free(cnt);
}

static void test_distribution(void **state) {
    (void)state;
    const char *tp = tiny_model(0, 8, 31, 2.0f);
    sp_model *tm = load(tp);
    const int32_t V = 8, prompt[] = {1, 5, 6, 5, 6, 5};
    double *dist = malloc((size_t)V * V * V * sizeof *dist);
    exact_dist(tm, prompt, 6, dist);
    const long N = SP_SLOW ? 1500 : 6000;
    const char *h1 = scratch("dist_head1.gguf"), *h2 = scratch("dist_head2.gguf");
    write_head(h1, tp, tm, &(head_opts){.layers = {1, 2, 3}, .draft_vocab = 5, .dim = 24, .heads = 3,
                                        .kv_heads = 1, .ffn = 40, .own_embd = true, .gain = 2, .seed = 11});
    write_head(h2, tp, tm, &(head_opts){.layers = {0, 3, 1}, .no_output = true, .nbr = true, .nbf = true,
                                        .gain = 2, .seed = 12});
    sp_eagle3 *a = load_head(h1, tm), *b = load_head(h2, tm);
    distribution_case(tm, a, "drafter=eagle3,gamma=4", dist, N);
    distribution_case(tm, b, "drafter=eagle3,gamma=2,verifier=token", dist, N);
    distribution_case(tm, b, "drafter=eagle3", dist, N); /* adaptive */
    /* greedy with accepted drafts: a head whose g is the target's final
     * state and whose own layer barely changes it predicts what the target
     * predicts one position earlier, right wherever the text repeats a
     * token; the random heads are right now and then */
    const char *h3 = scratch("dist_head3.gguf");
    write_head(h3, tp, tm, &(head_opts){.layers = {1, 2, 3}, .no_output = true, .copy_last = true,
                                        .gain = 0.01f, .seed = 13});
    sp_eagle3 *c = load_head(h3, tm);
    double acc = 0;
    greedy_case(tm, c, "drafter=eagle3,gamma=3", 1, prompt, 6, 64, &acc);
    if (!(acc > 0.3)) fail_msg("greedy with the copying head: acceptance %.3f", acc);
    greedy_case(tm, c, "drafter=eagle3,gamma=6", 2, prompt, 6, 64, &acc);
    greedy_case(tm, c, "drafter=eagle3,tree=2x2x1", 1, prompt, 6, 64, &acc);
    if (!(acc > 0.2)) fail_msg("greedy tree with the copying head: acceptance %.3f", acc);
    greedy_case(tm, b, "drafter=eagle3,tree=3x2", 2, prompt, 6, 64, NULL);
    /* a one-branch tree drafts the chain: the same acceptance, to the bit */
    double acc_chain = 0, acc_tree = 0;
    greedy_case(tm, c, "drafter=eagle3,gamma=4,verifier=greedy", 1, prompt, 6, 64, &acc_chain);
    greedy_case(tm, c, "drafter=eagle3,tree=1x1x1x1,verifier=greedy", 1, prompt, 6, 64, &acc_tree);
    if (acc_chain != acc_tree) fail_msg("chain acceptance %.4f, one-branch tree %.4f", acc_chain, acc_tree);
    /* and so does a dynamic tree of one child per level; a pruned one (the
     * head's rows placed by evaluation order, not node number) accepts */
    greedy_case(tm, c, "drafter=eagle3,tree=dyn:1:4:4,verifier=greedy", 1, prompt, 6, 64, &acc_tree);
    if (acc_chain != acc_tree) fail_msg("chain acceptance %.4f, one-branch dynamic tree %.4f", acc_chain, acc_tree);
    greedy_case(tm, c, "drafter=eagle3,tree=dyn:3:4:6", 1, prompt, 6, 64, &acc);
    if (!(acc > 0.2)) fail_msg("greedy dynamic tree with the copying head: acceptance %.3f", acc);
    greedy_case(tm, a, "drafter=eagle3,gamma=3", 1, prompt, 6, 64, NULL);
    greedy_case(tm, b, "drafter=eagle3,gamma=5", 2, prompt, 6, 64, NULL);
    distribution_case(tm, c, "drafter=eagle3,gamma=3", dist, N);
    distribution_case(tm, c, "drafter=eagle3,tree=2x2", dist, N);        /* mc-norep */
    distribution_case(tm, a, "drafter=eagle3,tree=3x1,verifier=mc", dist, N);
    distribution_case(tm, c, "drafter=eagle3,tree=dyn:3:2:4", dist, N); /* mc-norep, pruned */
    sp_eagle3_free(c);
    sp_eagle3_free(a);
    sp_eagle3_free(b);
    free(dist);
    sp_model_free(tm);
    unlink(tp);
}

/* ---------------------------------------------------------- bad inputs */

static void expect_head_error(const char *path, const sp_model *tm, sp_status want, const char *needle) {
    sp_error err = {0};
    sp_eagle3 *h = NULL;
    sp_status st = sp_eagle3_load(path, tm, &h, &err);
    if (st != want) fail_msg("%s: status %d (%s), want %d", path, st, err.msg, want);
    assert_null(h);
    if (!strstr(err.msg, needle)) fail_msg("%s: message '%s' lacks '%s'", path, err.msg, needle);
}

static void test_bad_heads(void **state) {
    (void)state;
    const char *tpath = sp_shared("models/stories260K.gguf");
    sp_model *tm = load(tpath), *other = load(sp_shared("reference/arch/models/llama-gqa4-f32.gguf"));
    const char *hp = scratch("bad_head.gguf");
    const head_opts ok = {.layers = {1, 2, 4}, .seed = 9};
    head_opts o = ok;
    o.arch = "llama";
    write_head(hp, tpath, tm, &o);
    expect_head_error(hp, tm, SP_ERR_ARG, "not an EAGLE-3 head");
    o = ok, o.layers[2] = 6;
    write_head(hp, tpath, tm, &o);
    expect_head_error(hp, tm, SP_ERR_ARG, "target layer 6 outside");
    o = ok, o.n_layers_listed = 2;
    write_head(hp, tpath, tm, &o);
    expect_head_error(hp, tm, SP_ERR_FORMAT, "array of 3 integers");
    o = ok, o.tgt_dim = 128;
    write_head(hp, tpath, tm, &o);
    expect_head_error(hp, tm, SP_ERR_ARG, "width 128, the target's are 64");
    o = ok, o.draft_vocab = 100, o.d2t_dup = true;
    write_head(hp, tpath, tm, &o);
    expect_head_error(hp, tm, SP_ERR_FORMAT, "d2t maps two draft ids");
    o = ok, o.dim = 32, o.heads = 4, o.kv_heads = 2;
    write_head(hp, tpath, tm, &o); /* narrower than the target, without its own embeddings */
    expect_head_error(hp, tm, SP_ERR_FORMAT, "no token_embd.weight");
    /* a good head for another target of another width */
    o = ok, o.layers[2] = 2;
    write_head(hp, tpath, tm, &o);
    expect_head_error(hp, other, SP_ERR_ARG, "width 64, the target's are 128");
    expect_head_error(tpath, tm, SP_ERR_ARG, "architecture 'llama' is not an EAGLE-3 head");
    /* truncated file */
    expect_head_error(scratch("missing.gguf"), tm, SP_ERR_IO, "missing.gguf");

    /* settings: eagle3 needs a head; a head of another model */
    sp_spec_config c;
    sp_error err = {0};
    sp_spec_config_init(&c, NULL);
    assert_int_equal(sp_spec_config_parse(&c, "drafter=eagle3", &err), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, false, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "'eagle3' needs an EAGLE-3 head"));
    sp_eagle3 *h = load_head(hp, tm);
    sp_ctx *t = mkctx(other, 128, 1);
    sp_spec_params sp = parse_ok("drafter=eagle3,gamma=2", true);
    sp_spec *s = NULL;
    assert_int_equal(sp_spec_init(t, &sp, &s, &err), SP_ERR_ARG); /* no head given */
    sp.draft.eagle3 = h;
    assert_int_equal(sp_spec_init(t, &sp, &s, &err), SP_ERR_ARG);
    assert_non_null(strstr(err.msg, "another target"));
    sp_ctx_free(t);
    sp_eagle3_free(h);
    sp_model_free(tm);
    sp_model_free(other);
}

/* Damaged head files: every truncation (at 61 lengths) and 200 random byte
 * changes load or fail with a message, never crash (ASan in SAN=1 runs);
 * what loads drafts without error. */
static void test_damaged_heads(void **state) {
    (void)state;
    sp_model *tm = load(sp_shared("models/stories260K.gguf"));
    FILE *f = fopen("tests/data/eagle3/stories260K-head.gguf", "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)len), *mod = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    const char *hp = scratch("damaged.gguf");
    sp_rng r;
    sp_rng_seed(&r, 77);
    int loaded = 0;
    for (int k = 0; k < 261; k++) {
        long n = len;
        memcpy(mod, buf, (size_t)len);
        if (k < 61) {
            n = k < 60 ? (long)((double)len * k / 60.0) : len - 1;
        } else { /* a few bytes of the header and metadata (the first 16 KiB) changed */
            for (int j = 0; j < 4; j++) mod[sp_rng_below(&r, 16384)] = (uint8_t)sp_rng_below(&r, 256);
        }
        FILE *o = fopen(hp, "wb");
        assert_non_null(o);
        assert_int_equal(fwrite(mod, 1, (size_t)n, o), (size_t)n);
        fclose(o);
        sp_error err = {0};
        sp_eagle3 *h = NULL;
        sp_status st = sp_eagle3_load(hp, tm, &h, &err);
        if (st) {
            assert_null(h);
            assert_true(err.msg[0] != 0);
            continue;
        }
        loaded++;
        sp_eagle3_ctx *ec = NULL;
        assert_int_equal(sp_eagle3_ctx_init(h, 32, 4, NULL, &ec, &err), SP_OK);
        const int32_t tok[2] = {1, 403};
        float *g = calloc((size_t)2 * sp_eagle3_dim(h), sizeof *g), *lg = malloc((size_t)2 * 512 * sizeof *lg);
        (void)sp_eagle3_decode(ec, tok, g, 2, true, lg, NULL, &err); /* may be non-finite: then an error */
        free(g);
        free(lg);
        sp_eagle3_ctx_free(ec);
        sp_eagle3_free(h);
    }
    printf("damaged heads: %d of 261 loaded\n", loaded);
    free(buf);
    free(mod);
    sp_model_free(tm);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_forward_matches_reference),
    cmocka_unit_test(test_greedy_equals_plain),
    cmocka_unit_test(test_distribution),
    cmocka_unit_test(test_bad_heads),
    cmocka_unit_test(test_damaged_heads),
};
SP_TEST_MAIN(tests)
