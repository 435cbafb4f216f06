/* Tests for `specula mkmodel` and `specula bench-forward` run as a
 * subprocess: the binary is ../specula next to this test's own directory
 * (found via /proc/self/exe), so the tests exercise the real flag parsing,
 * messages and exit codes. */
#include "testutil.h"

#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dev/sp_mkmodel.h"
#include "gguf.h"
#include "specula.h"

/* Path of the specula binary built beside this test (BUILD/specula). */
static const char *cli_path(void) {
    static char path[4096];
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = 0;
    snprintf(path, sizeof path, "%s/../specula", dirname(self));
    return path;
}

/* Runs `specula ARGS` with stdout+stderr captured into out (NUL-ended);
 * returns the exit status, or -1 if it did not exit normally. */
static int run_cli(const char *args, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", cli_path(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_mkmodel_makes_loadable_model(void **state) {
    (void)state;
    char path[512], args[1024], out[4096];
    snprintf(path, sizeof path, "%s/sp_test_cli_%d.gguf", sp_tmpdir(), (int)getpid());
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --dim=64 -layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 40 "
             "-ctx=128 --type q8_0 --seed 7", path); /* getopt_long_only: --k=v and one dash work */
    int rc = run_cli(args, out, sizeof out);
    if (rc != 0) {
        remove(path);
        fail_msg("mkmodel exited %d: %s", rc, out);
    }
    /* the file gets the mode the umask gives new files (mkstemp's 0600 was kept) */
    {
        mode_t um = umask(022);
        umask(um);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(sb.st_mode & 0777, 0666 & ~um);
    }
    sp_error err = {0};
    sp_model *m = NULL;
    if (sp_model_load(path, NULL, &m, &err)) fail_msg("load: %s", err.msg);
    const sp_model_config *cfg = sp_model_cfg(m);
    assert_int_equal(cfg->dim, 64);
    assert_int_equal(cfg->n_layers, 2);
    assert_int_equal(cfg->n_heads, 4);
    assert_int_equal(cfg->n_kv_heads, 2);
    assert_int_equal(cfg->ffn_dim, 96);
    assert_int_equal(cfg->n_vocab, 40);
    assert_int_equal(cfg->wtype, SP_GGML_Q8_0);
    sp_model_free(m);

    /* bench-forward runs on it and reports the numbers asked for */
    snprintf(args, sizeof args,
             "bench-forward -m '%s' -t 2 --reps 2 --depths 8,300 --decode 4 --bound-mb 16 -ctk f32 --prefill 40 "
             "--ubatch 16 --json", path);
    rc = run_cli(args, out, sizeof out);
    remove(path);
    if (rc != 0) fail_msg("bench-forward exited %d: %s", rc, out);
    assert_non_null(strstr(out, "\"decode_tok_s\""));
    assert_non_null(strstr(out, "\"gb_s\""));
    assert_non_null(strstr(out, "\"isa\""));
    assert_non_null(strstr(out, "\"bound_gb_s\""));
    assert_non_null(strstr(out, "\"pct_of_bound\""));
    assert_non_null(strstr(out, "\"load_ms\""));
    /* the measured bound is a positive figure, the percentage follows from it */
    {
        json_error_t je;
        json_t *j = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, &je);
        assert_non_null(j);
        double bound = json_real_value(json_object_get(j, "bound_gb_s"));
        double gbs = json_real_value(json_object_get(j, "gb_s"));
        double pct = json_real_value(json_object_get(j, "pct_of_bound"));
        assert_true(bound > 0.1);
        assert_true(fabs(pct - 100.0 * gbs / bound) < 1e-6 * (pct + 1));
        /* the prefill asked for: its tokens, batch, and a rate that is its time's */
        json_t *pf = json_object_get(j, "prefill");
        assert_non_null(pf);
        assert_int_equal(json_integer_value(json_object_get(pf, "tokens")), 40);
        assert_int_equal(json_integer_value(json_object_get(pf, "ubatch")), 16);
        const double ms = json_real_value(json_object_get(pf, "ms")), tps = json_real_value(json_object_get(pf, "tok_s"));
        assert_true(ms > 0 && fabs(tps - 40 / (ms / 1e3)) < 1e-6 * tps);
        json_decref(j);
    }
    /* the rollback after a k = 4 forward, and its share of that forward */
    {
        json_error_t je;
        json_t *j = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, &je);
        assert_non_null(j);
        json_t *rb = json_object_get(j, "rollback"), *fw = json_array_get(json_object_get(j, "forward"), 2);
        assert_non_null(rb);
        assert_int_equal(json_integer_value(json_object_get(rb, "kept")), 3);
        assert_int_equal(json_integer_value(json_object_get(fw, "k")), 4);
        const double ms = json_real_value(json_object_get(rb, "ms")), k4 = json_real_value(json_object_get(fw, "ms"));
        assert_true(ms >= 0 && fabs(json_real_value(json_object_get(rb, "of_forward")) - ms / k4) < 1e-6);
        json_decref(j);
    }
    assert_non_null(strstr(out, "\"k\":16"));
    /* one row per depth, and the cache types asked for */
    assert_non_null(strstr(out, "\"depth\":300"));
    assert_non_null(strstr(out, "\"type_k\":\"f32\""));
    assert_non_null(strstr(out, "\"type_v\":\"f16\""));
}

/* --arch gpt-oss --experts 4 --experts-used 2 --type mxfp4 writes a
 * mixture of experts (MXFP4 experts, Q8_0 elsewhere) that loads; its
 * bench-forward --json gives the experts per layer each k-token forward
 * read: 2 for one token, the union of the tokens' choices (2..4) beyond. */
static void test_mkmodel_moe(void **state) {
    (void)state;
    char path[512], args[1024], out[8192];
    snprintf(path, sizeof path, "%s/sp_test_cli_moe_%d.gguf", sp_tmpdir(), (int)getpid());
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --arch gpt-oss --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 64 --vocab 40 "
             "--experts 4 --experts-used 2 --sliding-window 4 --yarn 4 --ctx 256 --type mxfp4 --head-dim 32 --seed 7", path);
    int rc = run_cli(args, out, sizeof out);
    if (rc != 0) fail_msg("mkmodel exited %d: %s", rc, out);
    sp_error err = {0};
    sp_model *m = NULL;
    if (sp_model_load(path, NULL, &m, &err)) fail_msg("load: %s", err.msg);
    const sp_model_config *cfg = sp_model_cfg(m);
    assert_int_equal(cfg->n_expert, 4);
    assert_int_equal(cfg->n_expert_used, 2);
    assert_int_equal(cfg->wtype, SP_GGML_Q8_0);
    assert_int_equal(cfg->head_dim, 32); /* 4 heads of 32 over dim 64, as gpt-oss's 64 x 64 over 2880 */
    assert_true(sp_model_expert_bytes(m) > 0 && sp_model_expert_bytes(m) < sp_model_weight_bytes(m));
    sp_model_free(m);
    snprintf(args, sizeof args, "bench-forward -m '%s' -t 1 --reps 2 --depth 8 --decode 4 --bound-mb 16 --json", path);
    rc = run_cli(args, out, sizeof out);
    remove(path);
    if (rc != 0) fail_msg("bench-forward exited %d: %s", rc, out);
    json_error_t je;
    json_t *j = json_loads(strchr(out, '{'), JSON_DISABLE_EOF_CHECK, &je);
    assert_non_null(j);
    json_t *fw = json_object_get(j, "forward");
    assert_int_equal(json_array_size(fw), 5);
    for (size_t i = 0; i < json_array_size(fw); i++) {
        const double e = json_real_value(json_object_get(json_array_get(fw, i), "experts_per_layer"));
        if (i == 0) assert_true(e == 2.0);
        assert_true(e >= 2.0 && e <= 4.0);
    }
    json_decref(j);
}

/* --type q5_K_M writes llama-quantize's mix: Q6_K for output.weight and for
 * attn_v and ffn_down on layers 0 and 7 of 8 (the first and last eighth)
 * and 3 and 6 (every third between), Q5_K for the rest; --type iq4_xs
 * writes IQ4_XS matrices; both load. */
static void test_mkmodel_mixes(void **state) {
    (void)state;
    char path[512], args[1024], out[4096];
    snprintf(path, sizeof path, "%s/sp_test_cli_mix_%d.gguf", sp_tmpdir(), (int)getpid());
    static const char *types[] = {"q5_K_M", "iq4_xs"};
    for (int ti = 0; ti < 2; ti++) {
        snprintf(args, sizeof args,
                 "mkmodel --out '%s' --dim 256 --layers 8 --heads 4 --kv-heads 2 --ffn 512 --vocab 40 "
                 "--type %s --seed 3", path, types[ti]);
        int rc = run_cli(args, out, sizeof out);
        if (rc != 0) {
            remove(path);
            fail_msg("mkmodel --type %s exited %d: %s", types[ti], rc, out);
        }
        sp_error err = {0};
        sp_gguf *g = NULL;
        assert_int_equal(sp_gguf_open(path, &g, &err), SP_OK);
        const sp_gguf_tensor *t = sp_gguf_find_tensor(g, "output.weight");
        assert_non_null(t);
        assert_int_equal(t->type, ti == 0 ? SP_GGML_Q6_K : SP_GGML_IQ4_XS);
        for (int l = 0; l < 8; l++) {
            const bool more = ti == 0 && (l == 0 || l == 3 || l == 6 || l == 7);
            const sp_ggml_type base = ti == 0 ? SP_GGML_Q5_K : SP_GGML_IQ4_XS;
            static const char *names[] = {"attn_v", "ffn_down", "attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"};
            for (int ni = 0; ni < 7; ni++) {
                char nm[64];
                snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, names[ni]);
                t = sp_gguf_find_tensor(g, nm);
                assert_non_null(t);
                if ((int)t->type != (int)(more && ni < 2 ? SP_GGML_Q6_K : base))
                    fail_msg("%s: %s is %s", types[ti], nm, sp_ggml_type_name(t->type));
            }
        }
        sp_gguf_close(g);
        sp_model *m = NULL;
        if (sp_model_load(path, NULL, &m, &err)) fail_msg("load %s: %s", types[ti], err.msg);
        sp_model_free(m);
    }
    /* experts: ffn_down_exps follows ffn_down's rule (llama-quantize's
     * FFN_DOWN category), gate and up stay Q4_K */
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --dim 256 --layers 8 --heads 4 --kv-heads 2 --ffn 256 --vocab 40 --experts 2 "
             "--experts-used 1 --type q4_K_M --seed 3", path);
    int rc = run_cli(args, out, sizeof out);
    if (rc != 0) {
        remove(path);
        fail_msg("mkmodel MoE q4_K_M exited %d: %s", rc, out);
    }
    sp_error err = {0};
    sp_gguf *g = NULL;
    assert_int_equal(sp_gguf_open(path, &g, &err), SP_OK);
    for (int l = 0; l < 8; l++) {
        const bool more = l == 0 || l == 3 || l == 6 || l == 7;
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%d.ffn_down_exps.weight", l);
        const sp_gguf_tensor *t = sp_gguf_find_tensor(g, nm);
        assert_non_null(t);
        assert_int_equal(t->type, more ? SP_GGML_Q6_K : SP_GGML_Q4_K);
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate_exps.weight", l);
        t = sp_gguf_find_tensor(g, nm);
        assert_non_null(t);
        assert_int_equal(t->type, SP_GGML_Q4_K);
    }
    sp_gguf_close(g);
    remove(path);
}

/* Each bad invocation: exit 2 and one line naming the problem. */
static void test_mkmodel_bad_flags(void **state) {
    (void)state;
    static const struct {
        const char *args, *expect;
    } cases[] = {
        {"mkmodel --dim 64", "needs --out"},
        {"mkmodel --out /nonexistent/x.gguf --dim 6x4", "--dim must be an integer"},
        {"mkmodel --out x.gguf --dim", "--dim needs a value"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type q3_k --seed 1",
         "--type must be"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 3 --kv-heads 1 --ffn 64 --type f32 --seed 1 --vocab 32",
         "bad model shape"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 2",
         "--vocab must be"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 "
         "--vocab 32 --vocab-from y.gguf", "not both"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed -1",
         "--seed must be"},
        {"mkmodel --bogus", "unknown option '--bogus'"},
        {"mkmodel --out x.gguf --dim=6x4", "--dim must be an integer"},
        {"mkmodel --out x.gguf stray", "unexpected argument 'stray'"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 32 "
         "--experts 4", "--experts and --experts-used go together"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 32 "
         "--experts 4 --experts-used 5", "bad expert counts"},
        {"mkmodel --out x.gguf --arch qwen3moe --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 "
         "--seed 1 --vocab 32", "qwen3moe needs experts"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type mxfp4 --seed 1 --vocab 32",
         "mxfp4 is written for the experts"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 32 "
         "--yarn 0.5", "--yarn must be"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 32 "
         "--head-dim 7", "bad model shape"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 32 "
         "--head-dim 2000", "--head-dim must be"},
        {"mkmodel --out x.gguf --arch phi3 --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 "
         "--vocab 32 --head-dim 32", "not written for phi3"},
        {"mkmodel --out x.gguf --arch qwen35 --dim 256 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --type f32 --seed 1 "
         "--vocab 32 --ssm-groups 3", "3 recurrent key heads do not divide the 2 value heads"},
        {"mkmodel --out x.gguf --dim 64 --layers 1 --heads 4 --kv-heads 4 --ffn 64 --type f32 --seed 1 --vocab 32 "
         "--ssm-groups 2", "recurrent key heads are written for qwen35"},
        {"bench-forward", "needs a model"},
        {"bench-forward -m x.gguf --reps 0", "--reps must be"},
        {"bench-forward -m x.gguf --bound-mb 0", "--bound-mb must be"},
        {"bench-forward -m x.gguf --bogus", "unknown option"},
        {"bench-forward -m x.gguf --depths 8,4", "increase"},
        {"bench-forward -m x.gguf -ctk q2", "KV cache type"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run_cli(cases[i].args, out, sizeof out);
        if (rc != 2 || !strstr(out, cases[i].expect))
            fail_msg("'%s' exited %d with '%s' (want 2 and '%s')", cases[i].args, rc, out,
                     cases[i].expect);
        char *nl = strchr(out, '\n');
        if (!nl || nl[1]) fail_msg("'%s' printed more than one line: '%s'", cases[i].args, out);
    }
}

/* One table of architectures (sp_model_arch_name, the loader's): mkmodel
 * writes every one of them and the loader reads it back as that
 * architecture; mkmodel's usage and both refusals of an unknown name list
 * exactly the table. */
static void test_arch_table(void **state) {
    (void)state;
    char list[512] = "", path[512], msg[1024];
    int32_t n = 0;
    for (; sp_model_arch_name(n); n++) {
        const char *a = sp_model_arch_name(n);
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", n ? ", " : "", a);
        sp_mkmodel_params p = sp_mkmodel_default_params();
        p.dim = 64, p.n_layers = 2, p.n_heads = 4, p.n_kv_heads = 2, p.ffn_dim = 64, p.n_vocab = 40;
        p.n_ctx = 64, p.type = SP_GGML_F32, p.seed = 1, p.arch = a;
        snprintf(path, sizeof path, "%s/arch_%d.gguf", sp_tmpdir(), (int)n);
        sp_error err = {0};
        if (sp_mkmodel(&p, path, &err) && strstr(err.msg, "needs experts")) {
            p.n_expert = 4, p.n_expert_used = 2; /* qwen3moe, gpt-oss */
            err = (sp_error){0};
        }
        sp_status st = sp_mkmodel(&p, path, &err);
        if (st) fail_msg("mkmodel --arch %s: %s", a, err.msg);
        sp_model *m = NULL;
        if (sp_model_load(path, NULL, &m, &err)) fail_msg("load of mkmodel's %s: %s", a, err.msg);
        char want[64];
        snprintf(want, sizeof want, "%s ", a);
        assert_int_equal(strncmp(sp_model_desc(m), want, strlen(want)), 0);
        sp_model_free(m);
        remove(path);
    }
    assert_true(n >= 9);
    assert_null(sp_model_arch_name(-1));
    /* the usage names them all, | separated, in the table's order */
    char out[8192], bar[sizeof list + 16];
    assert_int_equal(run_cli("mkmodel --help", out, sizeof out), 0);
    snprintf(bar, sizeof bar, "[--arch %s]", list);
    for (char *c = bar; *c; c++)
        if (*c == ',' && c[1] == ' ') memmove(c, c + 1, strlen(c)), *c = '|';
    assert_non_null(strstr(out, bar));
    /* mkmodel's refusal and the loader's name the table */
    sp_mkmodel_params p = sp_mkmodel_default_params();
    p.dim = 64, p.n_layers = 1, p.n_heads = 4, p.n_kv_heads = 4, p.ffn_dim = 64, p.n_vocab = 40;
    p.n_ctx = 64, p.type = SP_GGML_F32, p.seed = 1, p.arch = "mamba";
    sp_error err = {0};
    assert_int_equal(sp_mkmodel(&p, path, &err), SP_ERR_ARG);
    snprintf(msg, sizeof msg, "architecture 'mamba' is not one mkmodel writes (%s)", list);
    assert_string_equal(err.msg, msg);
    p.arch = NULL;
    snprintf(path, sizeof path, "%s/arch_mamba.gguf", sp_tmpdir());
    assert_int_equal(sp_mkmodel(&p, path, &err), SP_OK);
    { /* rename the architecture in place: "llama" -> "mamba", same length */
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        static char buf[1 << 16];
        const size_t len = fread(buf, 1, sizeof buf, f);
        const char *key = "general.architecture";
        char *k = memmem(buf, len, key, strlen(key));
        assert_non_null(k);
        char *v = k + strlen(key) + 4 + 8; /* u32 type, u64 length */
        assert_memory_equal(v, "llama", 5);
        assert_int_equal(fseek(f, v - buf, SEEK_SET), 0);
        assert_int_equal(fwrite("mamba", 1, 5, f), 5);
        fclose(f);
    }
    sp_model *m = NULL;
    assert_int_equal(sp_model_load(path, NULL, &m, &err), SP_ERR_UNSUPPORTED);
    snprintf(msg, sizeof msg, "architecture 'mamba' is not supported (supported: %s)", list);
    assert_non_null(strstr(err.msg, msg));
    remove(path);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mkmodel_makes_loadable_model),
    cmocka_unit_test(test_mkmodel_bad_flags),
    cmocka_unit_test(test_mkmodel_moe),
    cmocka_unit_test(test_mkmodel_mixes),
    cmocka_unit_test(test_arch_table),
};
SP_TEST_MAIN(tests)
