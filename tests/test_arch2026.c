/* The files llama.cpp's architecture test generator writes (2026-09,
 * ../shared/reference/arch2026, see its README) against llama.cpp's own
 * logits: random-weight F16 models with the test vocabulary (no tokenizer:
 * token ids only), nearly every metadata key written whether the
 * architecture reads it or not (rope.scaling.factor 0, soft-capping values,
 * sliding windows on architectures without them), random per-matrix
 * ".scale" tensors, biases on q/k/v, attention output and FFN, random (also
 * negative) RoPE frequency factors, phi3 with separate q/k/v. Each file:
 * seqA (16 ids) and seqB (24) evaluated in one forward with the logits of
 * every position, every row within 1e-4 of llama.cpp's (relative to the
 * row's largest |logit|, absolute where that is below 1; the max is
 * printed, with the count of logits whose %.6g differs), and the 32 greedy
 * ids after each, one forward per token, equal to llama.cpp's. The context
 * is 512 tokens as the references' was (it picks phi3's long RoPE
 * factors). A file whose architecture Specula runs is one more row of
 * FILES: the six dense ones, the hybrid qwen35, the mixture-of-experts qwen3moe,
 * Mixtral-style llama and gpt-oss (F16, and MXFP4 experts with Q8_0
 * elsewhere), and the hybrids with experts and a shared expert qwen35moe
 * and qwen3next. Also: what the loader refuses in such files, one line naming
 * the key or tensor. */
#include "testutil.h"

#include <math.h>

#include "sp_model.h"
#include "specula.h"

/* The files of reference/arch2026/models (without .gguf) checked here. */
static const char *FILES[] = {
    "llama-dense-f16", "qwen2-dense-f16",  "qwen3-dense-f16",
    "phi3-dense-f16",  "gemma2-dense-f16", "gemma3-dense-f16",
    "qwen3moe-moe-f16", "llama-moe-f16",   "gpt-oss-moe-f16", "gpt-oss-moe-mxfp4", "qwen35-dense-f16",
    "qwen35moe-moe-f16", "qwen3next-moe-f16",
};

#define MAX_IDS 64

/* Whitespace-separated integers of a reference file; returns how many. */
static int read_ids(const char *rel, int32_t *ids, int cap) {
    FILE *f = fopen(sp_shared(rel), "r");
    if (!f) fail_msg("missing reference file %s", sp_shared(rel));
    int n = 0, v;
    while (n < cap && fscanf(f, "%d", &v) == 1) ids[n++] = v;
    fclose(f);
    return n;
}

static float *read_floats(const char *rel, int64_t n) {
    FILE *f = fopen(sp_shared(rel), "r");
    if (!f) fail_msg("missing reference file %s", sp_shared(rel));
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        if (fscanf(f, "%f", &v[i]) != 1) fail_msg("%s: fewer than %lld values", rel, (long long)n);
    fclose(f);
    return v;
}

/* The references' context: 512 tokens, an F32 cache (F16 for the kvf16
 * files). */
static sp_ctx *mkctx_typed(const sp_model *m, sp_ggml_type kv_type) {
    sp_ctx *c = NULL;
    sp_error err = {0};
    sp_ctx_params p = sp_ctx_default_params();
    p.n_ctx = 512;
    p.type_k = p.type_v = kv_type;
    if (sp_ctx_init(m, &p, &c, &err)) fail_msg("ctx: %s", err.msg);
    return c;
}

static sp_ctx *mkctx(const sp_model *m) { return mkctx_typed(m, SP_GGML_F32); }

/* The worst row of one sequence: max |diff| / max(1, max |want|). */
static double compare_logits(const sp_model *m, const char *file, const char *seq, const int32_t *ids,
                             int n, sp_ggml_type kv_type, int *misprinted) {
    const int V = sp_model_cfg(m)->n_vocab;
    char rel[200];
    snprintf(rel, sizeof rel, "reference/arch2026/logits/%s.%s.%slogits.txt", file, seq,
             kv_type == SP_GGML_F16 ? "kvf16." : "");
    float *want = read_floats(rel, (int64_t)n * V), *got = malloc((size_t)n * V * sizeof(float));
    sp_ctx *c = mkctx_typed(m, kv_type);
    sp_error err = {0};
    sp_batch b = {.tokens = ids, .n = n, .logits_all = true};
    if (sp_forward(c, &b, got, &err)) fail_msg("%s %s: %s", file, seq, err.msg);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double big = 0, d = 0;
        for (int i = 0; i < V; i++) {
            const float w = want[t * V + i], g = got[t * V + i];
            big = fmax(big, fabs(w));
            d = fmax(d, fabs((double)g - w));
            char txt[32];
            snprintf(txt, sizeof txt, "%.6g", (double)g);
            *misprinted += strtof(txt, NULL) != w;
        }
        worst = fmax(worst, d / fmax(1.0, big));
    }
    sp_ctx_free(c);
    free(want);
    free(got);
    return worst;
}

/* 32 greedy ids after ids (first index of the largest logit, as
 * llama.cpp's reference program), one forward per token; the step of the
 * first difference, or 32. */
static int compare_greedy(const sp_model *m, const char *file, const char *seq, const int32_t *ids, int n) {
    char rel[200];
    snprintf(rel, sizeof rel, "reference/arch2026/logits/%s.%s.greedy32.txt", file, seq);
    int32_t want[32];
    if (read_ids(rel, want, 32) != 32) fail_msg("%s: fewer than 32 ids", rel);
    const int V = sp_model_cfg(m)->n_vocab;
    float *lg = malloc((size_t)V * sizeof(float));
    sp_ctx *c = mkctx(m);
    sp_error err = {0};
    sp_batch b = {.tokens = ids, .n = n};
    if (sp_forward(c, &b, lg, &err)) fail_msg("%s: %s", file, err.msg);
    int step = 0;
    for (; step < 32; step++) {
        int32_t top = 0;
        for (int32_t j = 1; j < V; j++) top = lg[j] > lg[top] ? j : top;
        if (top != want[step]) {
            fprintf(stderr, "%s %s: greedy step %d: got %d, llama.cpp %d\n", file, seq, step, top, want[step]);
            break;
        }
        sp_batch one = {.tokens = &top, .n = 1};
        if (step < 31 && sp_forward(c, &one, lg, &err)) fail_msg("%s: %s", file, err.msg);
    }
    sp_ctx_free(c);
    free(lg);
    return step;
}

static void test_arch2026_logits(void **state) {
    (void)state;
    int32_t seq[2][MAX_IDS];
    const char *names[2] = {"seqA", "seqB"};
    int n[2];
    n[0] = read_ids("reference/arch2026/logits/seqA.ids", seq[0], MAX_IDS);
    n[1] = read_ids("reference/arch2026/logits/seqB.ids", seq[1], MAX_IDS);
    assert_int_equal(n[0], 16);
    assert_int_equal(n[1], 24);
    bool all_ok = true;
    for (size_t fi = 0; fi < sizeof FILES / sizeof FILES[0]; fi++) {
        char rel[200];
        snprintf(rel, sizeof rel, "reference/arch2026/models/%s.gguf", FILES[fi]);
        sp_model *m = NULL;
        sp_error err = {0};
        if (sp_model_load(sp_shared(rel), NULL, &m, &err)) fail_msg("%s: %s", FILES[fi], err.msg);
        assert_null(sp_model_tokenizer(m)); /* the test vocabulary: ids only */
        double worst[2];
        int misprinted = 0, mis16 = 0, greedy[2];
        for (int s = 0; s < 2; s++) {
            worst[s] = compare_logits(m, FILES[fi], names[s], seq[s], n[s], SP_GGML_F32, &misprinted);
            greedy[s] = compare_greedy(m, FILES[fi], names[s], seq[s], n[s]);
        }
        /* seqA with an F16 cache (the default) against llama.cpp's F16-cache
         * run: every logit as printed (tests/test_kvcache.c) where the F32
         * cache gives every logit as printed; else (MXFP4 experts: the fast
         * kernels' block order, tests/test_moe.c) within the same 1e-4 */
        const double w16 = compare_logits(m, FILES[fi], names[0], seq[0], n[0], SP_GGML_F16, &mis16);
        const bool ok16 = misprinted == 0 ? mis16 == 0 : w16 <= 1e-4;
        const bool ok = worst[0] <= 1e-4 && worst[1] <= 1e-4 && ok16 && greedy[0] == 32 && greedy[1] == 32;
        printf("arch2026 %-18s max rel|diff| A %.2e B %.2e  printed differently %4d  greedy A %d/32 B %d/32  "
               "F16 cache A %.2e (%d differently)%s\n",
               FILES[fi], worst[0], worst[1], misprinted, greedy[0], greedy[1], w16, mis16,
               ok ? "" : "  OUT OF TOLERANCE");
        all_ok &= ok;
        sp_model_free(m);
    }
    assert_true(all_ok);
}

/* ---- what the loader refuses ---- */

typedef enum { V_EXPERTS, V_ROPE_NAN, V_VOCAB_LEN, V_SCALE_SHAPE, V_ROPE_TYPE, V_ATTN_FACTOR, V_EXTRA } variant_kind;

/* llama-dense-f16 rewritten with one defect; returns its path. */
static const char *variant(variant_kind v) {
    static char path[512];
    snprintf(path, sizeof path, "%s/arch2026_variant_%d.gguf", sp_tmpdir(), (int)v);
    sp_error err = {0};
    sp_gguf *g = NULL;
    if (sp_gguf_open(sp_shared("reference/arch2026/models/llama-dense-f16.gguf"), &g, &err))
        fail_msg("%s", err.msg);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_copy_kv(w, g, NULL);
    if (v == V_EXPERTS) sp_gguf_writer_set_u32(w, "llama.expert_count", 4);
    if (v == V_ROPE_TYPE) sp_gguf_writer_set_str(w, "llama.rope.scaling.type", "longrope");
    if (v == V_ATTN_FACTOR) sp_gguf_writer_set_f32(w, "llama.rope.scaling.attn_factor", 0.5f);
    if (v == V_VOCAB_LEN) {
        sp_str toks[100];
        for (int i = 0; i < 100; i++) toks[i] = (sp_str){"t", 1};
        sp_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 100);
    }
    float nanv[128] = {0};
    const float two[2] = {1, 1};
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const void *data = t->data;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (v == V_ROPE_NAN && !strcmp(name, "rope_freqs.weight")) {
            memcpy(nanv, t->data, 64 * sizeof(float));
            nanv[7] = NAN;
            data = nanv;
        }
        if (v == V_SCALE_SHAPE && !strcmp(name, "blk.1.ffn_up.scale")) {
            ne[0] = 2; /* two floats where llama.cpp wants one */
            data = two;
        }
        assert_int_equal(sp_gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne, data, true, &err), SP_OK);
    }
    if (v == V_EXTRA) { /* a tensor llama does not have (qwen3's q norm) */
        const int64_t ne[1] = {128};
        assert_int_equal(sp_gguf_writer_add_tensor(w, "blk.0.attn_q_norm.weight", SP_GGML_F32, 1, ne, nanv, false, &err),
                         SP_OK);
    }
    if (sp_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(g);
    return path;
}

static void test_arch2026_refusals(void **state) {
    (void)state;
    static const struct {
        variant_kind v;
        const char *says;
    } CASES[] = {
        {V_EXPERTS, "llama.expert_count"},
        {V_ROPE_NAN, "rope_freqs.weight[7]"},
        {V_VOCAB_LEN, "tokenizer.ggml.tokens has 100 entries"},
        {V_SCALE_SHAPE, "blk.1.ffn_up.scale"},
        {V_ROPE_TYPE, "llama.rope.scaling.type"},
        {V_ATTN_FACTOR, "llama.rope.scaling.attn_factor"},
        {V_EXTRA, "tensor 'blk.0.attn_q_norm.weight' is not one architecture 'llama' has"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        sp_model *m = NULL;
        sp_error err = {0};
        assert_int_not_equal(sp_model_load(variant(CASES[i].v), NULL, &m, &err), SP_OK);
        assert_null(m);
        if (!strstr(err.msg, CASES[i].says)) fail_msg("case %d: '%s' does not name %s", (int)i, err.msg, CASES[i].says);
        assert_null(strchr(err.msg, '\n'));
    }
}

/* qwen3next-moe-f16 with layer 0's attn_qkv and attn_gate dropped (left:
 * the legacy fused ssm_in, which llama.cpp still reads): refused in one
 * line naming it. */
static void test_arch2026_legacy_ssm_in(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/arch2026_qwen3next_ssm_in.gguf", sp_tmpdir());
    sp_error err = {0};
    sp_gguf *g = NULL;
    if (sp_gguf_open(sp_shared("reference/arch2026/models/qwen3next-moe-f16.gguf"), &g, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_copy_kv(w, g, NULL);
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (!strncmp(name, "blk.0.attn_qkv.", 15) || !strncmp(name, "blk.0.attn_gate.", 16)) continue;
        assert_int_equal(sp_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, true, &err), SP_OK);
    }
    if (sp_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(g);
    sp_model *m = NULL;
    assert_int_not_equal(sp_model_load(path, NULL, &m, &err), SP_OK);
    assert_null(m);
    if (!strstr(err.msg, "legacy fused ssm_in")) fail_msg("'%s' does not name the legacy ssm_in", err.msg);
    assert_null(strchr(err.msg, '\n'));
    unlink(path);
}

/* phi3-dense-f16 without its q/k/v scales (a fused matrix has one), as
 * separate q/k/v (form 0), fused into attn_qkv with the three separate
 * biases (1), or with attn_qkv.bias (2); the fused forms without the q/k/v
 * input scales (llama.cpp reads those only with the separate matrices). */
static const char *phi3_form(int form) {
    static char path[512];
    snprintf(path, sizeof path, "%s/arch2026_phi3_%d.gguf", sp_tmpdir(), form);
    sp_error err = {0};
    sp_gguf *g = NULL;
    if (sp_gguf_open(sp_shared("reference/arch2026/models/phi3-dense-f16.gguf"), &g, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_copy_kv(w, g, NULL);
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const bool qkv = strstr(name, ".attn_q.") || strstr(name, ".attn_k.") || strstr(name, ".attn_v.");
        if (qkv && (strstr(name, ".scale") || (form > 0 && (strstr(name, ".weight") || strstr(name, "input_scale"))) ||
                    (form == 2 && strstr(name, ".bias"))))
            continue;
        assert_int_equal(sp_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, true, &err), SP_OK);
    }
    for (int l = 0; form > 0 && l < 2; l++) {
        static const char *KIND[2][3] = {{"attn_q.weight", "attn_k.weight", "attn_v.weight"},
                                         {"attn_q.bias", "attn_k.bias", "attn_v.bias"}};
        for (int b = 0; b < (form == 2 ? 2 : 1); b++) {
            const sp_gguf_tensor *p[3];
            size_t bytes[3], total = 0;
            int64_t rows = 0;
            for (int k = 0; k < 3; k++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%d.%s", l, KIND[b][k]);
                p[k] = sp_gguf_find_tensor(g, name);
                assert_non_null(p[k]);
                const int64_t r = p[k]->n_dims > 1 ? p[k]->ne[1] : 1;
                bytes[k] = sp_ggml_row_size(p[k]->type, p[k]->ne[0]) * (size_t)r;
                total += bytes[k];
                rows += b ? p[k]->ne[0] : r;
            }
            uint8_t *cat = malloc(total), *o = cat;
            for (int k = 0; k < 3; k++) o = (uint8_t *)memcpy(o, p[k]->data, bytes[k]) + bytes[k];
            int64_t ne[2] = {b ? rows : p[0]->ne[0], rows};
            char name[64];
            snprintf(name, sizeof name, "blk.%d.attn_qkv.%s", l, b ? "bias" : "weight");
            assert_int_equal(sp_gguf_writer_add_tensor(w, name, p[0]->type, b ? 1 : 2, ne, cat, false, &err), SP_OK);
            free(cat);
        }
    }
    if (sp_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(g);
    return path;
}

/* Fused or separate q/k/v, biases fused or separate: the same logits. */
static void test_arch2026_fused_qkv(void **state) {
    (void)state;
    int32_t ids[MAX_IDS];
    const int n = read_ids("reference/arch2026/logits/seqB.ids", ids, MAX_IDS);
    float *lg[3];
    for (int form = 0; form < 3; form++) {
        sp_model *m = NULL;
        sp_error err = {0};
        if (sp_model_load(phi3_form(form), NULL, &m, &err)) fail_msg("form %d: %s", form, err.msg);
        const int V = sp_model_cfg(m)->n_vocab;
        lg[form] = malloc((size_t)n * V * sizeof(float));
        sp_ctx *c = mkctx(m);
        sp_batch b = {.tokens = ids, .n = n, .logits_all = true};
        if (sp_forward(c, &b, lg[form], &err)) fail_msg("form %d: %s", form, err.msg);
        sp_ctx_free(c);
        sp_model_free(m);
    }
    assert_memory_equal(lg[0], lg[1], (size_t)n * 128 * sizeof(float));
    assert_memory_equal(lg[0], lg[2], (size_t)n * 128 * sizeof(float));
    for (int form = 0; form < 3; form++) free(lg[form]);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_arch2026_fused_qkv),
    cmocka_unit_test(test_arch2026_logits),
    cmocka_unit_test(test_arch2026_refusals),
    cmocka_unit_test(test_arch2026_legacy_ssm_in),
};

SP_TEST_MAIN(tests)
