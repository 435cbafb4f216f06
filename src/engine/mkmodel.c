/* mkmodel: random-weight Llama GGUF writer (see sp_mkmodel.h). */
#include "dev/sp_mkmodel.h"
#include "gguf_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "quant.h"
#include "rng.h"

bool sp_mkmodel_type_ok(sp_ggml_type t) { return sp_quant_supported(t) != 0; }

sp_mkmodel_params sp_mkmodel_default_params(void) {
    sp_mkmodel_params p = {.dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 128,
                           .n_ctx = 512, .n_vocab = 32, .vocab_from = NULL, .type = SP_GGML_F32,
                           .seed = 1, .logit_scale = 1.0f};
    return p;
}

/* Padding entries as converters write them (Qwen's embedding matrices are
 * larger than the tokenizer): ids [from, to) get the piece "[PAD<i>]",
 * type unused (5) and score -1000. names holds to - from 24-byte slots. */
static void fill_padding(sp_str *tok, float *score, int32_t *type, char (*names)[24], int32_t from,
                         int32_t to) {
    for (int32_t i = from; i < to; i++) {
        int len = snprintf(names[i - from], sizeof names[i - from], "[PAD%d]", (int)i);
        tok[i] = (sp_str){names[i - from], (size_t)len};
        if (score) score[i] = -1000.0f;
        if (type) type[i] = 5;
    }
}

/* Copies the tokenizer.* keys of another model into w; pad_to > the copied
 * size appends padding entries up to pad_to ids. */
static sp_status copy_vocab(sp_gguf_writer *w, const char *path, int32_t pad_to, int32_t *n_vocab,
                            sp_error *err) {
    sp_gguf *g;
    sp_status st = sp_gguf_open(path, &g, err);
    if (st) return st;
    const sp_gguf_kv *tk = sp_gguf_find(g, "tokenizer.ggml.tokens");
    if (!tk || tk->type != SP_GGUF_ARRAY || tk->arr_type != SP_GGUF_STRING) {
        sp_gguf_close(g);
        return sp_fail(err, SP_ERR_FORMAT, "%s: no tokenizer.ggml.tokens to copy", path);
    }
    const int32_t n = (int32_t)tk->arr_n;
    *n_vocab = n;
    sp_gguf_writer_copy_kv(w, g, "tokenizer.");
    if (pad_to > n) {
        const sp_gguf_kv *ks = sp_gguf_find(g, "tokenizer.ggml.scores");
        const sp_gguf_kv *kt = sp_gguf_find(g, "tokenizer.ggml.token_type");
        if (ks && (ks->type != SP_GGUF_ARRAY || ks->arr_type != SP_GGUF_FLOAT32 || ks->arr_n != (uint64_t)n))
            ks = NULL;
        if (kt && (kt->type != SP_GGUF_ARRAY || kt->arr_type != SP_GGUF_INT32 || kt->arr_n != (uint64_t)n))
            kt = NULL;
        sp_str *tok = malloc((size_t)pad_to * sizeof *tok);
        float *score = ks ? malloc((size_t)pad_to * sizeof *score) : NULL;
        int32_t *type = kt ? malloc((size_t)pad_to * sizeof *type) : NULL;
        char (*names)[24] = malloc((size_t)(pad_to - n) * sizeof *names);
        if (!tok || (ks && !score) || (kt && !type) || !names) {
            st = sp_fail(err, SP_ERR_NOMEM, "out of memory padding a vocabulary to %d", pad_to);
        } else {
            for (int32_t i = 0; i < n; i++) {
                tok[i] = sp_gguf_arr_str(tk, (uint64_t)i);
                if (score) score[i] = sp_gguf_arr_f32(ks, (uint64_t)i);
                if (type) type[i] = (int32_t)sp_gguf_arr_int(kt, (uint64_t)i);
            }
            fill_padding(tok, score, type, names, n, pad_to);
            sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)pad_to);
            if (score) sp_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", score, (uint64_t)pad_to);
            if (type) sp_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)pad_to);
            *n_vocab = pad_to;
        }
        free(tok), free(score), free(type), free(names);
    }
    sp_gguf_close(g);
    return st;
}

/* A made-up SPM vocabulary: <unk>, <s>, </s>, then printable characters
 * (space as U+2581), then two-letter pieces, scored so merges happen; then
 * padding entries up to `total` ids. */
static sp_status synth_vocab(sp_gguf_writer *w, int32_t n, int32_t total, sp_error *err) {
    if (total < n) total = n;
    sp_str *tok = calloc((size_t)total, sizeof *tok);
    float *score = calloc((size_t)total, sizeof *score);
    int32_t *type = calloc((size_t)total, sizeof *type);
    char (*buf)[8] = calloc((size_t)n, sizeof *buf);
    char (*names)[24] = calloc((size_t)(total - n + 1), sizeof *names);
    if (!tok || !score || !type || !buf || !names) {
        free(tok), free(score), free(type), free(buf), free(names);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory making a vocabulary of %d tokens", total);
    }
    const char *specials[3] = {"<unk>", "<s>", "</s>"};
    const char *chars = "\xe2\x96\x81" "etaoinshrdlucmfwypvbgkqjxz.,!?ETAOINSHRDLUCMFWYPVBGKQJXZ0123456789";
    int32_t i = 0;
    for (; i < 3 && i < n; i++) {
        tok[i] = (sp_str){specials[i], strlen(specials[i])};
        type[i] = i == 0 ? 2 : 3; /* unknown, control */
    }
    const char *c = chars;
    for (; i < n && *c; i++) {
        size_t len = (unsigned char)*c >= 0x80 ? 3 : 1;
        memcpy(buf[i], c, len);
        tok[i] = (sp_str){buf[i], len};
        score[i] = -(float)i;
        type[i] = 1;
        c += len;
    }
    for (int32_t a = 4, b = 4; i < n; i++) { /* "xy" pairs of early letters */
        buf[i][0] = chars[3 + a % 20];
        buf[i][1] = chars[3 + b % 20];
        tok[i] = (sp_str){buf[i], 2};
        score[i] = -(float)i;
        type[i] = 1;
        if (++b == 24) b = 4, a++;
    }
    fill_padding(tok, score, type, names, n, total);
    sp_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)total);
    sp_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", score, (uint64_t)total);
    sp_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)total);
    sp_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    sp_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    sp_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    free(tok);
    free(score);
    free(type);
    free(buf);
    free(names);
    return SP_OK;
}

/* rows x cols matrix with N(0, std^2) entries, stored as `type`. */
static sp_status add_random(sp_gguf_writer *w, const char *name, sp_ggml_type type, int64_t cols,
                            int64_t rows, float std, sp_rng *rng, sp_error *err) {
    size_t rb = sp_ggml_row_size(type, cols);
    uint8_t *data = malloc(rb * (size_t)rows);
    float *row = malloc((size_t)cols * sizeof(float));
    if (!data || !row) {
        free(data);
        free(row);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory making tensor %s", name);
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) row[i] = std * (float)sp_rng_normal(rng);
        sp_quantize_row(type, row, data + (size_t)r * rb, cols);
    }
    int64_t ne[2] = {cols, rows};
    sp_status st = sp_gguf_writer_add_tensor(w, name, type, rows > 1 ? 2 : 1, ne, data, false, err);
    free(data);
    free(row);
    return st;
}

/* n_expert matrices of rows x cols, N(0, std^2), as one 3-D tensor. */
static sp_status add_experts(sp_gguf_writer *w, const char *name, sp_ggml_type type, int64_t cols, int64_t rows,
                             int64_t n_expert, float std, sp_rng *rng, sp_error *err) {
    const size_t rb = sp_ggml_row_size(type, cols);
    uint8_t *data = malloc(rb * (size_t)(rows * n_expert));
    float *row = malloc((size_t)cols * sizeof(float));
    if (!data || !row) {
        free(data);
        free(row);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory making tensor %s", name);
    }
    for (int64_t r = 0; r < rows * n_expert; r++) {
        for (int64_t i = 0; i < cols; i++) row[i] = std * (float)sp_rng_normal(rng);
        sp_quantize_row(type, row, data + (size_t)r * rb, cols);
    }
    int64_t ne[3] = {cols, rows, n_expert};
    sp_status st = sp_gguf_writer_add_tensor(w, name, type, 3, ne, data, false, err);
    free(data);
    free(row);
    return st;
}

static sp_status add_ones(sp_gguf_writer *w, const char *name, int64_t n, sp_error *err) {
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) v[i] = 1.0f;
    int64_t ne[1] = {n};
    sp_status st = sp_gguf_writer_add_tensor(w, name, SP_GGML_F32, 1, ne, v, false, err);
    free(v);
    return st;
}

/* A [n] f32 vector of values lo + (hi - lo) u, u uniform. */
static sp_status add_uniform(sp_gguf_writer *w, const char *name, int64_t n, float lo, float hi, sp_rng *rng,
                             sp_error *err) {
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (float)sp_rng_uniform(rng);
    int64_t ne[1] = {n};
    sp_status st = sp_gguf_writer_add_tensor(w, name, SP_GGML_F32, 1, ne, v, false, err);
    free(v);
    return st;
}

/* Layer l of a qwen35, qwen35moe or qwen3next model: a Gated DeltaNet
 * layer (rec) or gated attention, then the FFN normed by
 * post_attention_norm (with experts: the routed ones, gate and up stacked
 * in ffn_gate_up_exps for qwen35moe, separate for qwen3next, and the
 * shared expert of --ffn with its gate vector). tm: attn_v and ffn_down's
 * type. */
static sp_status add_qwen35_layer(sp_gguf_writer *w, const sp_mkmodel_params *p, int32_t l, bool rec, int32_t S,
                                  int32_t nk, int32_t nv, int32_t conv_dim, sp_ggml_type tm, sp_rng *rng,
                                  sp_error *err) {
    const int32_t hd = p->dim / p->n_heads, q_dim = p->n_heads * hd, kv_dim = p->n_kv_heads * hd;
    const float sd = 1.0f / sqrtf((float)p->dim), sf = 1.0f / sqrtf((float)p->ffn_dim);
    const bool next = p->arch && !strcmp(p->arch, "qwen3next"), moe = p->n_expert > 0;
    const sp_ggml_type tmat = p->type == SP_GGML_MXFP4 ? SP_GGML_Q8_0 : p->type;
    char nm[96];
    sp_status st;
#define N(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
    if ((st = add_ones(w, N("attn_norm.weight"), p->dim, err)) ||
        (st = add_ones(w, N("post_attention_norm.weight"), p->dim, err)) ||
        (!moe && (st = add_random(w, N("ffn_gate.weight"), tmat, p->dim, p->ffn_dim, sd, rng, err))) ||
        (!moe && (st = add_random(w, N("ffn_up.weight"), tmat, p->dim, p->ffn_dim, sd, rng, err))) ||
        (!moe && (st = add_random(w, N("ffn_down.weight"), tm, p->ffn_dim, p->dim, sf, rng, err))))
        return st;
    if (moe && ((st = add_random(w, N("ffn_gate_inp.weight"), SP_GGML_F32, p->dim, p->n_expert, sd, rng, err)) ||
                (!next && (st = add_experts(w, N("ffn_gate_up_exps.weight"), p->type, p->dim, 2 * p->ffn_dim,
                                            p->n_expert, sd, rng, err))) ||
                (next && (st = add_experts(w, N("ffn_gate_exps.weight"), p->type, p->dim, p->ffn_dim, p->n_expert, sd,
                                           rng, err))) ||
                (next && (st = add_experts(w, N("ffn_up_exps.weight"), p->type, p->dim, p->ffn_dim, p->n_expert, sd,
                                           rng, err))) ||
                (st = add_experts(w, N("ffn_down_exps.weight"), p->type, p->ffn_dim, p->dim, p->n_expert, sf, rng, err)) ||
                (st = add_random(w, N("ffn_gate_inp_shexp.weight"), SP_GGML_F32, p->dim, 1, sd, rng, err)) ||
                (st = add_random(w, N("ffn_gate_shexp.weight"), tmat, p->dim, p->ffn_dim, sd, rng, err)) ||
                (st = add_random(w, N("ffn_up_shexp.weight"), tmat, p->dim, p->ffn_dim, sd, rng, err)) ||
                (st = add_random(w, N("ffn_down_shexp.weight"), tm, p->ffn_dim, p->dim, sf, rng, err))))
        return st;
    if (!rec)
        return (st = add_random(w, N("attn_q.weight"), tmat, p->dim, 2 * q_dim, sd, rng, err)) ||
                       (st = add_random(w, N("attn_k.weight"), tmat, p->dim, kv_dim, sd, rng, err)) ||
                       (st = add_random(w, N("attn_v.weight"), tm, p->dim, kv_dim, sd, rng, err)) ||
                       (st = add_random(w, N("attn_output.weight"), tmat, q_dim, p->dim, sd, rng, err)) ||
                       (st = add_ones(w, N("attn_q_norm.weight"), hd, err)) ||
                       (st = add_ones(w, N("attn_k_norm.weight"), hd, err))
                   ? st
                   : SP_OK;
    if ((st = add_random(w, N("attn_qkv.weight"), tmat, p->dim, conv_dim, sd, rng, err)) ||
        (st = add_random(w, N("attn_gate.weight"), tmat, p->dim, nv * S, sd, rng, err)) ||
        (!next && (st = add_random(w, N("ssm_beta.weight"), tmat, p->dim, nv, sd, rng, err))) ||
        (!next && (st = add_random(w, N("ssm_alpha.weight"), tmat, p->dim, nv, sd, rng, err))) ||
        (next && (st = add_random(w, N("ssm_ba.weight"), tmat, p->dim, 2 * nv, sd, rng, err))) ||
        (st = add_random(w, N("ssm_out.weight"), tmat, nv * S, p->dim, 1.0f / sqrtf((float)(nv * S)), rng, err)) ||
        (st = add_random(w, N("ssm_conv1d.weight"), SP_GGML_F32, 4, conv_dim, 0.5f, rng, err)) ||
        (st = add_uniform(w, N("ssm_dt.bias"), nv, -1.0f, 1.0f, rng, err)) ||
        (st = add_uniform(w, N("ssm_a"), nv, -1.5f, -0.1f, rng, err)) ||
        (st = add_ones(w, N("ssm_norm.weight"), S, err)))
        return st;
#undef N
    (void)nk;
    return SP_OK;
}

/* The layers llama-quantize's _M mixes give more bits: the first and last
 * eighth of n layers and every third one in between. */
static bool more_bits(int32_t l, int32_t n) { return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2; }

sp_status sp_mkmodel(const sp_mkmodel_params *p, const char *out_path, sp_error *err) {
    if (p->dim < 2 || p->dim > 16384 || p->n_layers < 1 || p->n_layers > 256 || p->n_heads < 1 ||
        p->n_kv_heads < 1 || (!p->head_dim && p->dim % p->n_heads) || p->n_heads % p->n_kv_heads ||
        (p->head_dim ? p->head_dim : p->dim / p->n_heads) % 2 || p->head_dim < 0 || p->head_dim > 1024 ||
        p->ffn_dim < 1 || p->ffn_dim > 65536 || p->n_ctx < 1)
        return sp_fail(err, SP_ERR_ARG,
                       "bad model shape: dim %d, layers %d, heads %d, kv heads %d, ffn %d, head size %d (need "
                       "heads | dim without a head size, kv heads | heads, even head size <= 1024)",
                       p->dim, p->n_layers, p->n_heads, p->n_kv_heads, p->ffn_dim, p->head_dim);
    /* every architecture the loader reads (its table, sp_model_arch_name) */
    bool arch_ok = !p->arch || !*p->arch;
    for (int32_t i = 0; sp_model_arch_name(i) && !arch_ok; i++) arch_ok = !strcmp(p->arch, sp_model_arch_name(i));
    if (!arch_ok) {
        char names[256];
        sp_model_arch_list(", ", names, sizeof names);
        return sp_fail(err, SP_ERR_ARG, "architecture '%s' is not one mkmodel writes (%s)", p->arch, names);
    }
    const char *arch = p->arch && *p->arch ? p->arch : "llama";
    const bool qwen3moe = !strcmp(arch, "qwen3moe"), gptoss = !strcmp(arch, "gpt-oss");
    const bool hyb_moe = !strcmp(arch, "qwen35moe") || !strcmp(arch, "qwen3next");
    const bool moe = p->n_expert > 0;
    if ((qwen3moe || gptoss || hyb_moe) && !moe)
        return sp_fail(err, SP_ERR_ARG, "%s needs experts (--experts E --experts-used K)", arch);
    if (moe && (strcmp(arch, "llama") && !qwen3moe && !gptoss && !hyb_moe))
        return sp_fail(err, SP_ERR_ARG, "experts are written for llama, qwen3moe, gpt-oss, qwen35moe and qwen3next, not %s",
                       arch);
    if (p->n_expert < 0 || p->n_expert > 256 || (moe && (p->n_expert_used < 1 || p->n_expert_used > p->n_expert)))
        return sp_fail(err, SP_ERR_ARG, "bad expert counts: %d experts, %d used (1 <= used <= experts <= 256)",
                       p->n_expert, p->n_expert_used);
    if (!sp_quant_supported(p->type))
        return sp_fail(err, SP_ERR_UNSUPPORTED, "cannot write weights of type %s",
                       sp_ggml_type_name(p->type));
    if (p->type == SP_GGML_MXFP4 && !moe)
        return sp_fail(err, SP_ERR_ARG, "mxfp4 is written for the experts of a mixture-of-experts model");
    if (p->mix_k_m && p->type != SP_GGML_Q4_K && p->type != SP_GGML_Q5_K)
        return sp_fail(err, SP_ERR_ARG, "the K_M mix is made from Q4_K or Q5_K, not %s",
                       sp_ggml_type_name(p->type));
    int64_t blk = sp_ggml_blck_size(p->type);
    if (p->dim % blk || p->ffn_dim % blk)
        return sp_fail(err, SP_ERR_ARG, "dim %d and ffn %d must be multiples of %lld for %s",
                       p->dim, p->ffn_dim, (long long)blk, sp_ggml_type_name(p->type));
    if (p->yarn_factor != 0 && !(p->yarn_factor > 1 && p->yarn_factor <= 1024 && p->n_ctx / p->yarn_factor >= 1))
        return sp_fail(err, SP_ERR_ARG, "YaRN factor must be in (1, 1024] and at most the context %d, got %g", p->n_ctx,
                       (double)p->yarn_factor);
    if (p->sliding_window < 0 || p->sliding_window > 1 << 20)
        return sp_fail(err, SP_ERR_ARG, "sliding window must be in [0, %d], got %d", 1 << 20, p->sliding_window);
    if (p->pad_vocab < 0 || p->pad_vocab > 1 << 20)
        return sp_fail(err, SP_ERR_ARG, "vocabulary padding must be in [0, %d], got %d", 1 << 20,
                       p->pad_vocab);
    if (!p->vocab_from && (p->n_vocab < 4 || p->n_vocab > 4096))
        return sp_fail(err, SP_ERR_ARG, "made-up vocabulary size must be in [4, 4096], got %d",
                       p->n_vocab);
    if (p->n_mtp < 0 || p->n_mtp > 8 || (p->n_mtp > 0 && strcmp(arch, "qwen35") && !hyb_moe))
        return sp_fail(err, SP_ERR_ARG, "MTP blocks (0 to 8, got %d) are written for qwen35, qwen35moe and qwen3next only",
                       p->n_mtp);
    if (p->head_dim && p->arch && (!strcmp(p->arch, "qwen35") || hyb_moe || !strcmp(p->arch, "phi3")))
        return sp_fail(err, SP_ERR_ARG, "a head size is not written for %s (its heads are dim / heads)", p->arch);
    if (p->arch && (!strcmp(p->arch, "qwen35") || hyb_moe)) {
        const int32_t hd0 = p->dim / p->n_heads, S = hd0 < 128 ? hd0 : 128;
        if (p->dim % S || p->n_layers < 1)
            return sp_fail(err, SP_ERR_ARG, "%s: dim %d must be a multiple of the recurrent head size %d", arch, p->dim, S);
    }
    sp_gguf_writer *w = sp_gguf_writer_init();
    if (!w) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    int32_t n_vocab = p->n_vocab;
    sp_status st = SP_OK;
    if (p->vocab_from)
        st = copy_vocab(w, p->vocab_from, p->pad_vocab, &n_vocab, err);
    else
        st = synth_vocab(w, n_vocab, p->pad_vocab, err);
    if (!p->vocab_from && p->pad_vocab > n_vocab) n_vocab = p->pad_vocab;
    const int32_t hd = p->head_dim ? p->head_dim : p->dim / p->n_heads, q_dim = p->n_heads * hd,
                  kv_dim = p->n_kv_heads * hd;
    const bool qwen2 = !strcmp(arch, "qwen2"), qwen3 = !strcmp(arch, "qwen3") || qwen3moe, phi3 = !strcmp(arch, "phi3");
    const bool gemma2 = !strcmp(arch, "gemma2"), gemma3 = !strcmp(arch, "gemma3");
    /* qwen35: three of every four layers Gated DeltaNet (value heads of S =
     * min(head size, 128), dim / S of them, half as many key heads), the
     * rest gated attention with a quarter of each head rotated (IMRoPE
     * sections 11:11:10 of its pairs, as Qwen3.5) */
    const bool q35 = !strcmp(arch, "qwen35") || hyb_moe, next = !strcmp(arch, "qwen3next");
    const int32_t dn_s = hd < 128 ? hd : 128, dn_v = p->dim / dn_s, dn_k = dn_v % 2 ? dn_v : dn_v / 2;
    const int32_t dn_conv = 2 * dn_k * dn_s + dn_v * dn_s, rot = q35 ? (hd / 4 + 1) / 2 * 2 : hd;
    char key[128];
#define K(s) (snprintf(key, sizeof key, "%s." s, arch), key)
    sp_gguf_writer_set_str(w, "general.architecture", arch);
    sp_gguf_writer_set_str(w, "general.name", "specula-random");
    sp_gguf_writer_set_u32(w, K("context_length"), (uint32_t)p->n_ctx);
    sp_gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)p->dim);
    sp_gguf_writer_set_u32(w, K("block_count"), (uint32_t)(p->n_layers + p->n_mtp));
    if (p->n_mtp > 0) sp_gguf_writer_set_u32(w, K("nextn_predict_layers"), (uint32_t)p->n_mtp);
    sp_gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)p->ffn_dim);
    sp_gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)p->n_heads);
    sp_gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)p->n_kv_heads);
    sp_gguf_writer_set_u32(w, K("rope.dimension_count"), (uint32_t)rot);
    if (q35) {
        const int32_t pairs = rot / 2, s0 = pairs * 11 / 32, sec[4] = {s0, s0, pairs - 2 * s0, 0};
        if (!next) sp_gguf_writer_set_arr_i32(w, K("rope.dimension_sections"), sec, 4); /* qwen3next: NeoX */
        sp_gguf_writer_set_u32(w, K("full_attention_interval"), 4);
        sp_gguf_writer_set_u32(w, K("ssm.conv_kernel"), 4);
        sp_gguf_writer_set_u32(w, K("ssm.state_size"), (uint32_t)dn_s);
        sp_gguf_writer_set_u32(w, K("ssm.group_count"), (uint32_t)dn_k);
        sp_gguf_writer_set_u32(w, K("ssm.time_step_rank"), (uint32_t)dn_v);
        sp_gguf_writer_set_u32(w, K("ssm.inner_size"), (uint32_t)(dn_v * dn_s));
    }
    sp_gguf_writer_set_u32(w, K("vocab_size"), (uint32_t)n_vocab);
    sp_gguf_writer_set_f32(w, K("rope.freq_base"), qwen2 || qwen3 || gemma3 || q35 ? 1e6f : 10000.0f);
    sp_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), qwen2 || qwen3 || q35 ? 1e-6f : 1e-5f);
    if (gemma2 || gemma3)
        sp_gguf_writer_set_u32(w, K("attention.sliding_window"), p->sliding_window > 0 ? (uint32_t)p->sliding_window : 4096);
    if (gemma2) {
        sp_gguf_writer_set_f32(w, K("attn_logit_softcapping"), 50.0f);
        sp_gguf_writer_set_f32(w, K("final_logit_softcapping"), 30.0f);
    }
    if (p->yarn_factor > 1) {
        sp_gguf_writer_set_str(w, K("rope.scaling.type"), "yarn");
        sp_gguf_writer_set_f32(w, K("rope.scaling.factor"), p->yarn_factor);
        sp_gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), (uint32_t)(p->n_ctx / p->yarn_factor));
    }
    if (moe) {
        sp_gguf_writer_set_u32(w, K("expert_count"), (uint32_t)p->n_expert);
        sp_gguf_writer_set_u32(w, K("expert_used_count"), (uint32_t)p->n_expert_used);
        if (qwen3moe || gptoss || hyb_moe) sp_gguf_writer_set_u32(w, K("expert_feed_forward_length"), (uint32_t)p->ffn_dim);
        if (hyb_moe) sp_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), (uint32_t)p->ffn_dim);
    }
    if (gptoss) /* sliding layers alternate with full ones, the first sliding (llama.cpp's default) */
        sp_gguf_writer_set_u32(w, K("attention.sliding_window"), p->sliding_window > 0 ? (uint32_t)p->sliding_window : 128);
    if (gptoss || p->head_dim) {
        sp_gguf_writer_set_u32(w, K("attention.key_length"), (uint32_t)hd);
        sp_gguf_writer_set_u32(w, K("attention.value_length"), (uint32_t)hd);
    }
#undef K

    sp_rng rng;
    sp_rng_seed(&rng, p->seed);
    const float sd = 1.0f / sqrtf((float)p->dim), sf = 1.0f / sqrtf((float)p->ffn_dim);
    const float so = (p->logit_scale > 0 ? p->logit_scale : 1.0f) * sd;
    char nm[96];
    /* MXFP4: the experts' type; the other matrices Q8_0 (as llama-quantize's MXFP4_MOE) */
    const sp_ggml_type tx = p->type, tmat = p->type == SP_GGML_MXFP4 ? SP_GGML_Q8_0 : p->type;
    if (!st) st = add_random(w, "token_embd.weight", tmat, p->dim, n_vocab, 1.0f, &rng, err);
    if (!st) st = add_ones(w, "output_norm.weight", p->dim, err);
    /* qwen2 and the gemmas tie the output to the embeddings, as their small models do */
    const sp_ggml_type t6 = p->mix_k_m ? SP_GGML_Q6_K : tmat;
    if (!st && !qwen2 && !gemma2 && !gemma3)
        st = add_random(w, "output.weight", t6, p->dim, n_vocab, so, &rng, err);
    for (int32_t l = 0; l < p->n_layers && !st; l++) {
        const sp_ggml_type tm = more_bits(l, p->n_layers) ? t6 : tmat; /* attn_v, ffn_down */
#define N(s) (snprintf(nm, sizeof nm, "blk.%d." s ".weight", l), nm)
#define NB(s) (snprintf(nm, sizeof nm, "blk.%d." s ".bias", l), nm)
        if (q35) {
            if ((st = add_qwen35_layer(w, p, l, (l + 1) % 4 != 0, dn_s, dn_k, dn_v, dn_conv, tm, &rng, err))) break;
            continue;
        }
        if ((st = add_ones(w, N("attn_norm"), p->dim, err)) ||
            (st = add_random(w, N("attn_output"), tmat, q_dim, p->dim, 1.0f / sqrtf((float)q_dim), &rng, err)) ||
            (st = add_ones(w, gptoss ? N("post_attention_norm") : N("ffn_norm"), p->dim, err)) ||
            (!moe && (st = add_random(w, N("ffn_down"), tm, p->ffn_dim, p->dim, sf, &rng, err))))
            break;
        if (phi3) {
            if ((st = add_random(w, N("attn_qkv"), tmat, p->dim, p->dim + 2 * kv_dim, sd, &rng, err)) ||
                (st = add_random(w, N("ffn_up"), tmat, p->dim, 2 * p->ffn_dim, sd, &rng, err)))
                break;
        } else if ((st = add_random(w, N("attn_q"), tmat, p->dim, q_dim, sd, &rng, err)) ||
                   (st = add_random(w, N("attn_k"), tmat, p->dim, kv_dim, sd, &rng, err)) ||
                   (st = add_random(w, N("attn_v"), tm, p->dim, kv_dim, sd, &rng, err)) ||
                   (!moe && (st = add_random(w, N("ffn_gate"), tmat, p->dim, p->ffn_dim, sd, &rng, err))) ||
                   (!moe && (st = add_random(w, N("ffn_up"), tmat, p->dim, p->ffn_dim, sd, &rng, err)))) {
            break;
        }
        if (moe && ((st = add_random(w, N("ffn_gate_inp"), SP_GGML_F32, p->dim, p->n_expert, sd, &rng, err)) ||
                    (st = add_experts(w, N("ffn_gate_exps"), tx, p->dim, p->ffn_dim, p->n_expert, sd, &rng, err)) ||
                    (st = add_experts(w, N("ffn_up_exps"), tx, p->dim, p->ffn_dim, p->n_expert, sd, &rng, err)) ||
                    (st = add_experts(w, N("ffn_down_exps"), p->mix_k_m ? tm : tx, p->ffn_dim, p->dim, p->n_expert, sf,
                                      &rng, err))))
            break;
        if ((qwen2 || gptoss) && ((st = add_random(w, NB("attn_q"), SP_GGML_F32, q_dim, 1, 0.1f, &rng, err)) ||
                                  (st = add_random(w, NB("attn_k"), SP_GGML_F32, kv_dim, 1, 0.1f, &rng, err)) ||
                                  (st = add_random(w, NB("attn_v"), SP_GGML_F32, kv_dim, 1, 0.1f, &rng, err))))
            break;
        if (gptoss && ((st = add_random(w, NB("attn_output"), SP_GGML_F32, p->dim, 1, 0.1f, &rng, err)) ||
                       (st = add_random(w, N("attn_sinks"), SP_GGML_F32, p->n_heads, 1, 1.0f, &rng, err)) ||
                       (st = add_random(w, NB("ffn_gate_inp"), SP_GGML_F32, p->n_expert, 1, 0.1f, &rng, err)) ||
                       (st = add_random(w, NB("ffn_gate_exps"), SP_GGML_F32, p->ffn_dim, p->n_expert, 0.1f, &rng, err)) ||
                       (st = add_random(w, NB("ffn_up_exps"), SP_GGML_F32, p->ffn_dim, p->n_expert, 0.1f, &rng, err)) ||
                       (st = add_random(w, NB("ffn_down_exps"), SP_GGML_F32, p->dim, p->n_expert, 0.1f, &rng, err))))
            break;
        if ((qwen3 || gemma3) && ((st = add_ones(w, N("attn_q_norm"), hd, err)) ||
                                  (st = add_ones(w, N("attn_k_norm"), hd, err))))
            break;
        if ((gemma2 || gemma3) && ((st = add_ones(w, N("post_attention_norm"), p->dim, err)) ||
                                   (st = add_ones(w, N("post_ffw_norm"), p->dim, err))))
            break;
#undef N
#undef NB
    }
    /* MTP blocks: blk.(n_layers + i), a gated-attention layer with the
     * trunk's FFN (the experts and the shared expert for qwen35moe and
     * qwen3next, as llama.cpp's loaders read them) and the nextn tensors */
    for (int32_t i = 0; i < p->n_mtp && !st; i++) {
        const int32_t l = p->n_layers + i;
#define N(s) (snprintf(nm, sizeof nm, "blk.%d.nextn." s ".weight", l), nm)
        if ((st = add_qwen35_layer(w, p, l, false, dn_s, dn_k, dn_v, dn_conv, tmat, &rng, err)) ||
            (st = add_random(w, N("eh_proj"), tmat, 2 * p->dim, p->dim, 1.0f / sqrtf(2.0f * (float)p->dim), &rng, err)) ||
            (st = add_ones(w, N("enorm"), p->dim, err)) || (st = add_ones(w, N("hnorm"), p->dim, err)) ||
            (st = add_ones(w, N("shared_head_norm"), p->dim, err)))
            break;
#undef N
    }
    if (!st) st = sp_gguf_writer_write(w, out_path, err);
    sp_gguf_writer_free(w);
    return st;
}
