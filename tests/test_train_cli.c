/* End-to-end tests of `specula train` and `specula distill`: a short run
 * writes a GGUF checkpoint that `specula generate -md` loads as a draft
 * (greedy output unchanged), the loss curve CSV, and bad input fails with
 * one line and a non-zero exit. */
#include "testutil.h"

#include <jansson.h>
#include <libgen.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_testutil.h"

static const char *tgt(void) { return sp_shared("models/stories260K.gguf"); }

/* The first `bytes` of the shared TinyStories sample into DIR/name. */
static const char *text_file(const char *name, long skip, size_t bytes) {
    static char path[2][600];
    static int slot;
    char *p = path[slot++ & 1];
    snprintf(p, sizeof path[0], "%s/%s", sp_tmpdir(), name);
    FILE *in = fopen(sp_shared("data/tinystories_val_sample.txt"), "rb");
    assert_non_null(in);
    fseek(in, skip, SEEK_SET);
    char *buf = malloc(bytes);
    size_t n = fread(buf, 1, bytes, in);
    fclose(in);
    FILE *out = fopen(p, "wb");
    assert_non_null(out);
    fwrite(buf, 1, n, out);
    fclose(out);
    free(buf);
    return p;
}

static void test_distill_then_draft(void **state) {
    (void)state;
    const char *train = text_file("train.txt", 0, 20000), *held = text_file("held.txt", 700000, 8000);
    char args[4096], out[16384], draft[600];
    snprintf(draft, sizeof draft, "%s/d.gguf", sp_tmpdir());
    snprintf(args, sizeof args,
             "distill -m '%s' --draft-shape 32,1,4,2,64 --data '%s' --eval '%s' --loss jsd:0.5 "
             "--steps 12 --batch 4 --seq 32 --seed 3 --out '%s' --quiet --on-policy 0.5 --topk 16",
             tgt(), train, held, draft);
    int rc = cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out);
    if (rc) fail_msg("distill exited %d: %s", rc, out);
    double before, after;
    const char *h = strstr(out, "held-out jsd:0.5 loss: ");
    assert_non_null(h);
    assert_int_equal(sscanf(h, "held-out jsd:0.5 loss: %lf before, %lf after", &before, &after), 2);
    assert_true(after < before);
    /* the curve: header plus one line per step */
    char csv[700];
    snprintf(csv, sizeof csv, "%s.loss.csv", draft);
    FILE *f = fopen(csv, "r");
    assert_non_null(f);
    int lines = 0;
    for (int c; (c = fgetc(f)) != EOF;) lines += c == '\n';
    fclose(f);
    assert_int_equal(lines, 13);
    /* generate loads it as a draft; greedy output equals plain greedy */
    char plain[16384];
    snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 40 --temp 0", tgt());
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, plain, sizeof plain), 0);
    snprintf(args, sizeof args, "generate -m '%s' -md '%s' -p 'Once upon a time' -n 40 --temp 0 --json", tgt(), draft);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    const char *text = json_string_value(json_object_get(j, "text"));
    assert_non_null(text);
    assert_non_null(strstr(plain, text));
    assert_true(sp_json_num(json_object_get(j, "spec"), "drafted") > 0);
    json_decref(j);
    /* the same seed gives the same checkpoint */
    char draft2[600];
    snprintf(draft2, sizeof draft2, "%s/d2.gguf", sp_tmpdir());
    snprintf(args, sizeof args,
             "distill -m '%s' --draft-shape 32,1,4,2,64 --data '%s' --loss jsd:0.5 --steps 12 --batch 4 "
             "--seq 32 --seed 3 --out '%s' --quiet --on-policy 0.5 --topk 16 -t 2",
             tgt(), train, draft2);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
    char cmp[2000];
    snprintf(cmp, sizeof cmp, "cmp -s '%s' '%s'", draft, draft2);
    assert_int_equal(system(cmp), 0);
}

static void test_train_from_text(void **state) {
    (void)state;
    const char *train = text_file("train.txt", 0, 20000);
    char args[4096], out[16384], m[600];
    snprintf(m, sizeof m, "%s/m.gguf", sp_tmpdir());
    snprintf(args, sizeof args,
             "train --shape 32,1,2,1,64 --vocab-from '%s' --data '%s' --eval '%s' --steps 30 --batch 4 "
             "--seq 32 --lr 1e-2 --out '%s' --type q8_0 --quiet",
             tgt(), train, train, m);
    int rc = cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out);
    if (rc) fail_msg("train exited %d: %s", rc, out);
    double before, after;
    const char *h = strstr(out, "held-out ce loss: ");
    assert_non_null(h);
    assert_int_equal(sscanf(h, "held-out ce loss: %lf before, %lf after", &before, &after), 2);
    assert_true(after < before - 0.5); /* from about log 512 = 6.2 */
    /* continue from the checkpoint */
    snprintf(args, sizeof args, "train --init '%s' --data '%s' --steps 2 --batch 2 --seq 16 --out '%s.2' --quiet",
             m, train, m);
    assert_int_equal(cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out), 0);
}

static void test_bad_input(void **state) {
    (void)state;
    const char *train = text_file("train.txt", 0, 4000);
    char out[8192], args[4096];
    struct { const char *args; const char *msg; } cases[] = {
        {"distill --data X --out Y", "-m TARGET"},
        {"distill -m T --draft-shape 32,1,4,2,64 --out Y", "--data"},
        {"distill -m T --draft-shape 32,1,4,2,64 --data X --out Y --loss kl", "loss"},
        {"distill -m T --draft-shape 32,1,4,2,64 --data X --out Y --loss ce", "fkl"},
        {"distill -m T --draft-shape 32,1,4,2,64 --data X --out Y --steps 0", "--steps"},
        {"distill -m T --data X --out Y", "--draft-shape"},
        {"train --shape 32,1,2,1,64 --data X --out Y --on-policy 0.5", "unknown option"},
        {"train --shape 32,1,2,1,64 --data X --out Y -m T", "unknown option '-m'"},
        {"train --shape 32,1,2,1,64 --data X --out Y --steps=0", "--steps must be"},
        {"train --shape 32,1,2,1,64 --data X --out Y -t", "-t needs a value"},
        {"distill -m T --draft-shape 32,1,4,2,64 --data X --out Y --on-policy 2", "--on-policy"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = cli_run(cases[i].args, SP_CAPTURE_STDERR, out, sizeof out);
        if (rc == 0 || !strstr(out, cases[i].msg) || sp_count_lines(out) != 1)
            fail_msg("'%s': exit %d, '%s'", cases[i].args, rc, out);
    }
    /* shapes, files: a directory as data, a missing target, an odd shape */
    const char *files[][2] = {
        {"--draft-shape 30,1,4,2,64 --data '%s'", "draft_shape"},
        {"--draft-shape 32,1,4,2,64 --data /", "is a directory"},
        {"--draft-shape 32,1,4,2,64 --data /nonexistent", "nonexistent"},
        {"--draft-init /nonexistent --data '%s'", "nonexistent"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char tail[1500];
        snprintf(tail, sizeof tail, files[i][0], train);
        snprintf(args, sizeof args, "distill -m '%s' %s --steps 1 --out '%s/o.gguf' --quiet", tgt(), tail, sp_tmpdir());
        int rc = cli_run(args, SP_CAPTURE_STDERR, out, sizeof out);
        if (rc == 0 || !strstr(out, files[i][1]) || sp_count_lines(out) < 1)
            fail_msg("'%s': exit %d, '%s'", args, rc, out);
    }
}

/* train-head: the loss falls, the head drafts without changing greedy
 * output, and bad flags fail with one line. */
static void test_train_head(void **state) {
    (void)state;
    const char *train = text_file("head.txt", 0, 8000);
    char out[8192], args[4096], plain[8192];
    snprintf(args, sizeof args, "train-head -m '%s' --head eagle3 --data '%s' --head-ffn 64 --steps 40 --seq 32 "
             "--seed 3 --quiet --out '%s/h.gguf'", tgt(), train, sp_tmpdir());
    if (cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out)) fail_msg("%s: %s", args, out);
    double a = 0, b = 0;
    const char *l = strstr(out, "fkl loss ");
    if (!l || sscanf(l, "fkl loss %lf (first %*d steps) -> %lf", &a, &b) != 2) fail_msg("output '%s'", out);
    if (!(b < a - 0.5)) fail_msg("loss %.4f -> %.4f did not fall", a, b);
    snprintf(args, sizeof args, "generate -m '%s' -p 'Once upon a time' -n 48 --temp 0", tgt());
    if (cli_run(args, SP_CAPTURE_STDOUT, plain, sizeof plain)) fail_msg("%s", plain);
    snprintf(args, sizeof args, "generate -m '%s' -md '%s/h.gguf' --draft eagle3 --draft-p-min 0 -p 'Once upon a time' "
             "-n 48 --temp 0", tgt(), sp_tmpdir());
    if (cli_run(args, SP_CAPTURE_STDOUT, out, sizeof out)) fail_msg("%s", out);
    assert_string_equal(out, plain);
    const struct { const char *args, *msg; } cases[] = {
        {"train-head --head eagle3 --data X --out Y", "-m TARGET"},
        {"train-head -m T --head medusa --data X --out Y", "--head must be eagle3"},
        {"train-head -m T --head eagle3 --data X --out Y --loss ce", "a head distils"},
        {"train-head -m T --head eagle3 --data X --out Y --unroll 9", "--unroll"},
        {"train-head -m T --head eagle3 --data X --out Y --seq 4 --unroll 3", "too short"},
        {"train-head -m T --head eagle3 --data X --out Y --draft-vocab -3", "--draft-vocab"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = cli_run(cases[i].args, SP_CAPTURE_STDERR, out, sizeof out);
        if (rc == 0 || !strstr(out, cases[i].msg) || sp_count_lines(out) != 1)
            fail_msg("'%s': exit %d, '%s'", cases[i].args, rc, out);
    }
    const char *bad[][2] = {{"--layers 1,2", "three layers"}, {"--layers 1,2,9", "outside"},
                            {"--draft-vocab 1", "1 token is no vocabulary"}};
    for (size_t i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "train-head -m '%s' --head eagle3 --data '%s' %s --out '%s/x.gguf'", tgt(), train,
                 bad[i][0], sp_tmpdir());
        int rc = cli_run(args, SP_CAPTURE_STDERR, out, sizeof out);
        if (rc == 0 || !strstr(out, bad[i][1]) || sp_count_lines(out) != 1) fail_msg("'%s': exit %d, '%s'", args, rc, out);
    }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_train_head),
    cmocka_unit_test(test_distill_then_draft),
    cmocka_unit_test(test_train_from_text),
    cmocka_unit_test(test_bad_input),
};
SP_TEST_MAIN(tests)
