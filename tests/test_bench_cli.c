/* End-to-end tests of `specula bench` on stories260K: results.json fields
 * and values (plain baseline, self-draft at temperature 0 accepts
 * everything), results.csv shape, PNG plots when gnuplot is installed, and
 * exit code 2 with one stderr line for bad input. The binary is found as
 * ../specula next to the test binary's directory. */
#include "cli_testutil.h"

#include <math.h>
#include <stdbool.h>
#include <sys/stat.h>

static char g_dir[1024];

static void remove_scratch(void) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

/* A fresh scratch directory for this process, removed at exit. */
static const char *scratch(void) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "%s/bench_test_XXXXXX", sp_tmpdir());
        assert_non_null(mkdtemp(g_dir));
        atexit(remove_scratch);
    }
    return g_dir;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Run `specula bench ARGS`, capturing stderr; returns the exit code. */
static int run_bench(const char *args, char *buf, size_t cap) {
    char full[8192];
    snprintf(full, sizeof full, "bench %s", args);
    return cli_run(full, SP_CAPTURE_STDERR, buf, cap);
}


static json_t *find_config(json_t *cfgs, const char *name) {
    for (size_t i = 0; i < json_array_size(cfgs); i++) {
        json_t *c = json_array_get(cfgs, i);
        if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    }
    fprintf(stderr, "config %s missing from results.json\n", name);
    fail();
    return NULL;
}

static bool has_png(const char *dir, const char *name) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) return false;
    unsigned char sig[8] = {0};
    size_t n = fread(sig, 1, 8, f);
    fclose(f);
    static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    return n == 8 && !memcmp(sig, png, 8);
}

#define CONFIGS                                                                         \
    "draft=model,gamma=4;draft=ngram,gamma=4;draft=layerskip,skip=1,3,gamma=2;"       \
    "draft=lowbit,lowbit=q8_0,gamma=3;draft=model,tree=2x2,verify=mc-norep"
static const char *const NAMES[] = {"plain", "draft=model,gamma=4", "draft=ngram,gamma=4",
                                    "draft=layerskip,skip=1,3,gamma=2",
                                    "draft=lowbit,lowbit=q8_0,gamma=3",
                                    "draft=model,tree=2x2,verify=mc-norep"};
#define N_NAMES (sizeof NAMES / sizeof NAMES[0])

static void test_run(void **state) {
    (void)state;
    const char *dir = scratch();
    char prompts[1200], out[1200], args[4096], err[8192];
    snprintf(prompts, sizeof prompts, "%s/prompts.jsonl", dir);
    snprintf(out, sizeof out, "%s/out/nested", dir);
    write_file(prompts, "{\"prompt\": \"Once upon a time\"}\n\n"
                        "{\"id\": 2, \"prompt\": \"The little dog ran to the park\"}\n");
    const char *model = sp_shared("models/stories260K.gguf");
    snprintf(args, sizeof args,
             "-m '%s' -md '%s' --prompts '%s' --configs '" CONFIGS "' -n 16 --repeat 1 --temp 0 "
             "--out '%s'",
             model, model, prompts, out);
    int rc = run_bench(args, err, sizeof err);
    if (rc) fprintf(stderr, "stderr: %s\n", err);
    assert_int_equal(rc, 0);

    char path[2048];
    snprintf(path, sizeof path, "%s/results.json", out);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fprintf(stderr, "results.json: %s\n", je.text);
    assert_non_null(j);
    assert_int_equal((int)sp_json_num(j, "n_predict"), 16);
    assert_int_equal((int)sp_json_num(j, "n_prompts"), 2);
    json_t *cfgs = json_object_get(j, "configs");
    assert_int_equal(json_array_size(cfgs), N_NAMES);
    /* plain first, in list order after it */
    for (size_t i = 0; i < N_NAMES; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(cfgs, i), "name")),
                            NAMES[i]);
    for (size_t i = 0; i < N_NAMES; i++) {
        json_t *c = find_config(cfgs, NAMES[i]);
        assert_true(sp_json_num(c, "tokens_per_second") > 0);
        assert_true(sp_json_num(c, "speedup") > 0);
        assert_true(sp_json_num(c, "speedup_std") >= 0);
        assert_true(sp_json_num(c, "block_efficiency") >= 1);
        assert_int_equal((int)sp_json_num(c, "runs"), 2);
        assert_int_equal(json_array_size(json_object_get(c, "speedup_by_repeat")), 1);
        if (i == 0) continue;
        double ar = sp_json_num(c, "acceptance_rate");
        assert_true(ar >= 0 && ar <= 1);
        assert_true(sp_json_num(c, "mean_accepted") >= 0);
        json_t *spec = json_object_get(c, "spec");
        assert_true(json_is_object(spec));
        json_t *h = json_object_get(spec, "accept_hist");
        assert_true(json_is_array(h));
        /* the summed histogram counts every iteration of both runs */
        json_int_t sum = 0;
        for (size_t k = 0; k < json_array_size(h); k++) sum += json_integer_value(json_array_get(h, k));
        assert_int_equal(sum, json_integer_value(json_object_get(spec, "iterations")));
    }
    json_t *plain = find_config(cfgs, "plain");
    assert_true(sp_json_num(plain, "speedup") == 1.0);
    json_t *ar = json_object_get(plain, "acceptance_rate");
    assert_true(!ar || json_number_value(ar) == 0);
    /* the target drafting for itself at temperature 0 accepts everything */
    json_t *self = find_config(cfgs, "draft=model,gamma=4");
    assert_true(sp_json_num(self, "acceptance_rate") == 1.0);
    assert_true(sp_json_num(self, "block_efficiency") > 1);
    /* runs: every (config, prompt), same seed for every config on a prompt */
    json_t *runs = json_object_get(j, "runs");
    assert_int_equal(json_array_size(runs), 2 * N_NAMES);
    for (size_t i = 0; i < json_array_size(runs); i++) {
        json_t *r = json_array_get(runs, i);
        json_t *r0 = json_array_get(runs, i - i % N_NAMES);
        assert_int_equal(json_integer_value(json_object_get(r, "seed")),
                         json_integer_value(json_object_get(r0, "seed")));
        assert_true(sp_json_num(r, "n_generated") >= 1 && sp_json_num(r, "n_generated") <= 16);
        assert_int_equal(json_object_get(r, "spec") != NULL, i % N_NAMES != 0);
    }
    json_decref(j);

    /* results.csv: header + one row per config */
    snprintf(path, sizeof path, "%s/results.csv", out);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        if (lines == 0) assert_non_null(strstr(line, "configuration,acceptance_rate,block_efficiency"));
        if (lines == 1) assert_int_equal(strncmp(line, "plain,", 6), 0);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, 1 + (int)N_NAMES);

    if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
        assert_true(has_png(out, "tokens_per_second.png"));
        assert_true(has_png(out, "block_efficiency.png"));
        assert_true(has_png(out, "accept_hist.png"));
    }
}

static void test_json_stdout(void **state) {
    (void)state;
    const char *dir = scratch();
    char prompts[1200], cmd[4096];
    snprintf(prompts, sizeof prompts, "%s/one.jsonl", dir);
    write_file(prompts, "{\"prompt\": \"Once upon a time\"}\n");
    snprintf(cmd, sizeof cmd,
             "bench -m '%s' --prompts '%s' --configs 'draft=ngram,gamma=2' -n 8 --repeat 2 "
             "--json --out '%s/json-out'",
             sp_shared("models/stories260K.gguf"), prompts, dir);
    static char buf[1 << 20];
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, buf, sizeof buf), 0);
    assert_int_equal(sp_count_lines(buf), 1);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    assert_non_null(j);
    json_t *cfgs = json_object_get(j, "configs");
    assert_int_equal(json_array_size(cfgs), 2);
    assert_int_equal(json_array_size(json_object_get(j, "runs")), 4);
    json_t *ng = find_config(cfgs, "draft=ngram,gamma=2");
    assert_int_equal(json_array_size(json_object_get(ng, "speedup_by_repeat")), 2);
    json_decref(j);
}

static void test_bad_input(void **state) {
    (void)state;
    const char *dir = scratch();
    char good[1200], bad_json[1200], no_field[1200], empty[1200], missing[1200];
    snprintf(good, sizeof good, "%s/good.jsonl", dir);
    snprintf(bad_json, sizeof bad_json, "%s/bad.jsonl", dir);
    snprintf(no_field, sizeof no_field, "%s/nofield.jsonl", dir);
    snprintf(empty, sizeof empty, "%s/empty.jsonl", dir);
    snprintf(missing, sizeof missing, "%s/does-not-exist.jsonl", dir);
    write_file(good, "{\"prompt\": \"Once upon a time\"}\n");
    write_file(bad_json, "{\"prompt\": \"fine\"}\n{\"prompt\": \"broken\"\n");
    write_file(no_field, "{\"text\": \"no prompt field\"}\n");
    write_file(empty, "\n\n");
    const char *model = sp_shared("models/stories260K.gguf");
    static const char *bad[] = {
        "--configs 'draft=bogus'",
        "--configs 'draft=ngram,gamma=0'",
        "--configs 'draft=ngram,gamma=99'",
        "--configs 'draft=ngram,gama=4'",
        "--configs 'draft=ngram,gamma=4,gamma=2'",
        "--configs 'draft=ngram,skip=1'",
        "--configs 'draft=ngram,tree=2x2'",
        "--configs 'draft=layerskip,tree=2x2,verify=token'",
        "--configs 'draft=layerskip,tree=2x2,gamma=4'",
        "--configs 'draft=layerskip,tree=2x'",
        "--configs 'draft=layerskip,skip=9'",
        "--configs 'draft=lowbit,lowbit=q3'",
        "--configs 'draft=ngram,ngram_min=5,ngram_max=2'",
        "--configs 'draft=ngram,verify=mc-norep'",
        "--configs 'draft=ngram,lenience=0.5'",
        "--configs 'draft=model'",
        "--configs 'verify=token'",
        "--configs 'draft=ngram;draft=ngram'",
        "--configs 'draft=none,gamma=4'",
        "--configs 'draft=ngram,p_min=2'",
        "--configs 'draft=ngram,verify=greedy' --temp 1",
        /* reliability probe, item 8: empty settings and lists */
        "--configs ',,,'",
        "--configs ';;;'",
        "--configs 'draft=ngram,,gamma=4'",
        "--configs 'draft=layerskip,skip=1,'",
        "--configs 'draft=ngram,n_max=0'",
        "--configs 'draft=ngram,n_min=5,gamma=4'",
        "--configs 'draft=ngram' stray",
        "-n 0",
        "-n 100000000",
        "-n 600",
        "--repeat 0",
        "--repeat x",
        "--temp -1",
        "--top-p 0",
        "--bogus",
        "--out",
    };
    char args[4096], err[8192];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "-m '%s' --prompts '%s' -n 8 --out '%s/bad-out' %s", model,
                 good, dir, bad[i]);
        int rc = run_bench(args, err, sizeof err);
        if (rc != 2 || sp_count_lines(err) != 1)
            fprintf(stderr, "args '%s': rc %d stderr '%s'\n", bad[i], rc, err);
        assert_int_equal(rc, 2);
        assert_int_equal(sp_count_lines(err), 1);
    }
    /* prompt files and models */
    const char *files[] = {bad_json, no_field, empty, missing};
    for (size_t i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "-m '%s' --prompts '%s' -n 8 --out '%s/bad-out'", model,
                 files[i], dir);
        int rc = run_bench(args, err, sizeof err);
        if (rc != 2 || sp_count_lines(err) != 1) fprintf(stderr, "file %zu: rc %d stderr '%s'\n", i, rc, err);
        assert_int_equal(rc, 2);
        assert_int_equal(sp_count_lines(err), 1);
    }
    snprintf(args, sizeof args, "--prompts '%s' --out '%s/bad-out'", bad_json, dir);
    assert_int_equal(run_bench(args, err, sizeof err), 2); /* no -m */
    assert_int_equal(sp_count_lines(err), 1);
    snprintf(args, sizeof args, "-m '%s/nope.gguf' --prompts '%s' --out '%s/bad-out'", dir, good, dir);
    assert_int_equal(run_bench(args, err, sizeof err), 2);
    assert_int_equal(sp_count_lines(err), 1);
    /* the malformed line is named */
    snprintf(args, sizeof args, "-m '%s' --prompts '%s' --out '%s/bad-out'", model, bad_json, dir);
    assert_int_equal(run_bench(args, err, sizeof err), 2);
    assert_non_null(strstr(err, ":2:"));
}

/* A prompt stream with domain labels, two drafts (stories260K itself, which
 * the greedy target always accepts, and a fresh random draft), online
 * learning and routing: stream.csv has a row per run, stream.png is drawn,
 * the router sends the late prompts to the good draft, online runs report
 * their wait, and misuse is one line. */
static void test_stream(void **state) {
    (void)state;
    const char *dir = scratch();
    const char *model = sp_shared("models/stories260K.gguf");
    char prompts[1200], out[1200], fresh[1200], args[7000], err[8192], path[1400];
    snprintf(prompts, sizeof prompts, "%s/stream.jsonl", dir);
    snprintf(out, sizeof out, "%s/stream-out", dir);
    snprintf(fresh, sizeof fresh, "%s/fresh.gguf", dir);
    snprintf(args, sizeof args,
             "mkmodel --out '%s' --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --vocab-from '%s' "
             "--type f32 --seed 3",
             fresh, model);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, err, sizeof err), 0);
    FILE *f = fopen(prompts, "w");
    assert_non_null(f);
    for (int i = 0; i < 24; i++)
        fprintf(f, "{\"prompt\": \"%s %d\", \"domain\": \"%s\"}\n",
                i < 12 ? "Once upon a time there was a dog" : "Tom and Sue went to the park", i,
                i < 12 ? "a" : "b");
    fclose(f);
    snprintf(args, sizeof args,
             "-m '%s' -md '%s' -md '%s' --prompts '%s' -n 24 --temp 0 --out '%s' --block 6 "
             "--configs 'gamma=3;gamma=3,online=1,route=1;gamma=3,route=auto' --online-every 32 "
             "--online-steps 4 --online-sync --json",
             model, model, fresh, prompts, out);
    char cmd[8300];
    static char buf[1 << 20];
    snprintf(cmd, sizeof cmd, "bench %s", args);
    assert_int_equal(cli_run(cmd, SP_CAPTURE_STDOUT, buf, sizeof buf), 0);
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    assert_non_null(j);
    json_t *runs = json_object_get(j, "runs");
    assert_int_equal(json_array_size(runs), 24 * 4);
    int routed_good = 0, routed_late = 0, online_runs = 0;
    for (size_t i = 0; i < json_array_size(runs); i++) {
        json_t *r = json_array_get(runs, i);
        const char *c = json_string_value(json_object_get(r, "config"));
        const int prompt = (int)json_integer_value(json_object_get(r, "prompt"));
        if (!strcmp(c, "gamma=3,route=auto") && prompt >= 12 && !json_object_get(r, "explored")) {
            routed_late++;
            routed_good += json_integer_value(json_object_get(r, "draft")) == 0;
        }
        if (!strcmp(c, "gamma=3,online=1,route=1")) {
            online_runs++;
            assert_int_equal(json_integer_value(json_object_get(r, "draft")), 1);
            assert_true(json_real_value(json_object_get(r, "learn_wait_seconds")) >= 0);
        }
        if (!strcmp(c, "plain")) assert_null(json_object_get(r, "draft"));
    }
    printf("router: %d of %d late unexplored prompts to the good draft\n", routed_good, routed_late);
    assert_true(routed_late >= 6 && routed_good == routed_late);
    assert_int_equal(online_runs, 24);
    json_decref(j);
    snprintf(path, sizeof path, "%s/stream.csv", out);
    f = fopen(path, "r");
    assert_non_null(f);
    int lines = 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) lines++;
    fclose(f);
    assert_int_equal(lines, 1 + 24 * 4);
    if (has_png(out, "tokens_per_second.png")) assert_true(has_png(out, "stream.png")); /* gnuplot present */
    /* misuse */
    snprintf(path, sizeof path, "%s/bad-domain.jsonl", dir);
    write_file(path, "{\"prompt\": \"hi\", \"domain\": 3}\n");
    const char *bad[] = {"-md '%s' --configs 'gamma=3,route=2'", "-md '%s' --configs 'draft=ngram,online=1'",
                         "-md '%s' --configs 'gamma=3,online=maybe'", "-md '%s' --configs 'gamma=3,route=x'",
                         "-md '%s' --configs 'tree=2x2,online=1'", "-md '%s' --explore 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char extra[2048];
        snprintf(extra, sizeof extra, bad[i], model);
        snprintf(args, sizeof args, "-m '%s' --prompts '%s' -n 8 --out '%s/bad-out' %s", model, prompts, dir, extra);
        int rc = run_bench(args, err, sizeof err);
        if (rc != 2 || sp_count_lines(err) != 1) fprintf(stderr, "'%s': rc %d stderr '%s'\n", extra, rc, err);
        assert_int_equal(rc, 2);
        assert_int_equal(sp_count_lines(err), 1);
    }
    snprintf(args, sizeof args, "-m '%s' -md '%s' --prompts '%s' -n 8 --out '%s/bad-out'", model, model, path, dir);
    assert_int_equal(run_bench(args, err, sizeof err), 2);
    assert_non_null(strstr(err, "domain"));
    /* several drafts are for bench only */
    snprintf(args, sizeof args, "generate -m '%s' -md '%s' -md '%s' -p hi -n 4", model, model, model);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDERR, err, sizeof err), 1);
    assert_int_equal(sp_count_lines(err), 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_run),
    cmocka_unit_test(test_stream),
    cmocka_unit_test(test_json_stdout),
    cmocka_unit_test(test_bad_input),
};
SP_TEST_MAIN(tests)
