/* `--draft eagle3 -md HEAD.gguf` end to end: generate drafts with the head
 * of tests/data/eagle3 and prints plain decoding's tokens; bench runs
 * draft=eagle3 configurations with a head as -md; misuse (a head as a
 * draft model, eagle3 without a head, a head of another target) is
 * one line and a non-zero exit. */
#include "cli_testutil.h"

static const char *HEAD = "tests/data/eagle3/stories260K-head.gguf";

static json_t *run_json(const char *args) {
    static char out[1 << 20];
    int rc = cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out);
    if (rc != 0) fail_msg("specula %s: exit %d", args, rc);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("specula %s: not JSON (%s)", args, je.text);
    return j;
}

static void expect_error(const char *args, int code, const char *needle) {
    char err[8192];
    int rc = cli_run(args, SP_CAPTURE_STDERR, err, sizeof err);
    if (rc != code) fail_msg("specula %s: exit %d, want %d (%s)", args, rc, code, err);
    if (!strstr(err, needle)) fail_msg("specula %s: '%s' lacks '%s'", args, err, needle);
    if (sp_count_lines(err) != 1) fail_msg("specula %s: more than one line: %s", args, err);
}

static void test_generate(void **state) {
    (void)state;
    const char *m = sp_shared("models/stories260K.gguf");
    char args[4096];
    snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 48 --temp 0 --json", m);
    json_t *plain = run_json(args);
    const char *variants[] = {"--gamma 4", "--gamma 2 --verify token", "--adaptive", "-t 2 --gamma 3", "--tree 3x2x1"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 48 --temp 0 --json --draft eagle3 -md '%s' %s",
                 m, HEAD, variants[v]);
        json_t *j = run_json(args);
        if (!json_equal(json_object_get(j, "tokens"), json_object_get(plain, "tokens")))
            fail_msg("%s: tokens differ from plain decoding", variants[v]);
        json_t *s = json_object_get(j, "spec");
        assert_non_null(s);
        assert_string_equal(json_string_value(json_object_get(s, "drafter")), "eagle3");
        assert_true(sp_json_num(s, "drafted") > 0);
        assert_true(sp_json_num(s, "draft_forwards") > 0);
        json_decref(j);
    }
    json_decref(plain);
}

static void test_bench(void **state) {
    (void)state;
    const char *m = sp_shared("models/stories260K.gguf");
    char args[4096];
    snprintf(args, sizeof args,
             "bench -m '%s' -md '%s' --configs 'plain;draft=eagle3,gamma=3' -n 16 --temp 0 --json --out '%s/b'", m,
             HEAD, sp_tmpdir());
    json_t *j = run_json(args);
    const char *desc = json_string_value(json_object_get(j, "draft_model_desc"));
    assert_non_null(desc);
    assert_non_null(strstr(desc, "eagle3"));
    assert_true(json_array_size(json_object_get(j, "configs")) == 2);
    json_decref(j);
    snprintf(args, sizeof args, "bench -m '%s' -md '%s' --configs 'draft=model,gamma=3' -n 8 --out '%s/b'", m, HEAD,
             sp_tmpdir());
    expect_error(args, 2, "is an EAGLE-3 head (draft=eagle3)");
    snprintf(args, sizeof args, "bench -m '%s' -md '%s' --configs 'draft=eagle3,gamma=3' -n 8 --out '%s/b'", m, m,
             sp_tmpdir());
    expect_error(args, 2, "is not an EAGLE-3 head (draft=model)");
}

static void test_misuse(void **state) {
    (void)state;
    const char *m = sp_shared("models/stories260K.gguf");
    const char *other = sp_shared("reference/arch/models/llama-gqa4-f32.gguf");
    char args[4096];
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 4 -md '%s'", m, HEAD);
    expect_error(args, 1, "is an EAGLE-3 head: draft with it by --draft eagle3");
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 4 --draft eagle3", m);
    expect_error(args, 2, "'eagle3' needs an EAGLE-3 head file");
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 4 --draft eagle3 -md '%s'", m, m);
    expect_error(args, 1, "is not an EAGLE-3 head");
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 4 --draft eagle3 -md '%s'", other, HEAD);
    expect_error(args, 1, "target layer 4 outside the target's [0, 2]");
}

/* Online learning of a head: `specula online --draft eagle3` writes a head
 * that drafts again, and generate --online with the head keeps plain
 * decoding's greedy tokens; a head the trainer cannot learn, a tree, and a
 * head given as a draft model to learn are refused in one line. */
static void test_online(void **state) {
    (void)state;
    const char *m = sp_shared("models/stories260K.gguf"), *trained = "tests/data/eagle3/stories260K-trained-head.gguf";
    char args[4096], out[8192];
    snprintf(args, sizeof args,
             "online -m '%s' --draft eagle3 -md '%s' --out '%s/h.gguf' --rounds 2 --gens 1 -n 24 --steps 3 --temp 0",
             m, trained, sp_tmpdir());
    if (cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out)) fail_msg("specula %s failed", args);
    assert_int_equal(sp_count_lines(out), 3); /* the header and two rounds */
    snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 40 --temp 0 --json", m);
    json_t *plain = run_json(args);
    snprintf(args, sizeof args,
             "generate -m '%s' -p 'Once upon a time' -n 40 --temp 0 --json --draft eagle3 -md '%s/h.gguf' --online "
             "--online-sync --online-every 8 --online-steps 2 --online-out '%s/h2.gguf'",
             m, sp_tmpdir(), sp_tmpdir());
    json_t *j = run_json(args);
    assert_true(json_equal(json_object_get(plain, "tokens"), json_object_get(j, "tokens")));
    assert_true(json_integer_value(json_object_get(json_object_get(j, "online"), "swaps")) >= 1);
    json_decref(j);
    json_decref(plain);
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 8 --temp 0 --draft eagle3 -md '%s/h2.gguf'", m,
             sp_tmpdir());
    if (cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out)) fail_msg("the exported head does not draft: %s", args);
    /* bench: a draft=eagle3 configuration with online=1 */
    char prompts[512];
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", sp_tmpdir());
    FILE *pf = fopen(prompts, "w");
    assert_non_null(pf);
    fputs("{\"prompt\": \"Once upon a time\"}\n{\"prompt\": \"Once upon a time\"}\n", pf);
    fclose(pf);
    snprintf(args, sizeof args,
             "bench -m '%s' -md '%s' --prompts '%s' --configs 'draft=eagle3,gamma=3,online=1' -n 16 --temp 0 "
             "--online-sync --online-every 8 --online-steps 1 --json --out '%s/b'",
             m, trained, prompts, sp_tmpdir());
    json_decref(run_json(args));
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 4 --draft eagle3 -md '%s' --online", m, HEAD);
    expect_error(args, 1, "this head cannot learn online (a reduced draft vocabulary (d2t))");
    snprintf(args, sizeof args, "generate -m '%s' -p Once -n 4 --draft eagle3 -md '%s' --online --tree 2x2", m, trained);
    expect_error(args, 2, "and a chain (no --tree)");
    snprintf(args, sizeof args, "online -m '%s' -md '%s' --out '%s/x.gguf'", m, trained, sp_tmpdir());
    expect_error(args, 1, "is an EAGLE-3 head: learn it with --draft eagle3");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_generate),
    cmocka_unit_test(test_bench),
    cmocka_unit_test(test_misuse),
    cmocka_unit_test(test_online),
};
SP_TEST_MAIN(tests)
