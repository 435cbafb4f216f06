/* Tests of sp_file: SHA-256 against the FIPS 180-4 example vectors and the
 * sums ../shared/models/README.md publishes; directories and FIFOs where a
 * file belongs are one clear error (through the library and through every
 * CLI flag that names a file), never a hang. */
#include "cli_testutil.h"

#include <sys/stat.h>

#include "specula.h"
#include "tokenizer_load.h"

static void hex(const uint8_t d[32], char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256_vectors(void **state) {
    (void)state;
    uint8_t d[32];
    char h[65];
    sp_sha256("abc", 3, d);
    hex(d, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sp_sha256("", 0, d);
    hex(d, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sp_sha256(m448, strlen(m448), d);
    hex(d, h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a': many blocks, exercises the block carry */
    char *mil = malloc(1000000);
    assert_non_null(mil);
    memset(mil, 'a', 1000000);
    sp_sha256(mil, 1000000, d);
    free(mil);
    hex(d, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_shared_model_sums(void **state) {
    (void)state;
    static const char *files[][2] = {
        {"models/stories260K.bin", "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"},
        {"models/tok512.bin", "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"},
        {"models/stories260K.gguf", "047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char h[65];
        sp_error err;
        if (sp_file_sha256(sp_shared(files[i][0]), "model", h, &err))
            fail_msg("%s (is ../shared beside the checkout, or SPECULA_SHARED set?)", err.msg);
        if (strcmp(h, files[i][1])) fail_msg("%s: sha256 %s, README says %s", files[i][0], h, files[i][1]);
    }
}

/* A directory and a FIFO (nobody writing) given where a file belongs. */
typedef struct odd_paths {
    char dir[1024], fifo[1024];
} odd_paths;

static void make_odd(odd_paths *o) {
    snprintf(o->dir, sizeof o->dir, "%s/specula_test_dir_%d", sp_tmpdir(), (int)getpid());
    snprintf(o->fifo, sizeof o->fifo, "%s/specula_test_fifo_%d", sp_tmpdir(), (int)getpid());
    assert_int_equal(mkdir(o->dir, 0700), 0);
    assert_int_equal(mkfifo(o->fifo, 0600), 0);
}

static void remove_odd(const odd_paths *o) {
    rmdir(o->dir);
    unlink(o->fifo);
}

static void test_library_refuses_odd_files(void **state) {
    (void)state;
    odd_paths o;
    make_odd(&o);
    const char *paths[] = {o.dir, o.fifo};
    for (int i = 0; i < 2; i++) {
        sp_error err;
        sp_model *m = NULL;
        assert_int_equal(sp_model_load(paths[i], NULL, &m, &err), SP_ERR_IO);
        assert_null(m);
        assert_non_null(strstr(err.msg, i ? "not a regular file" : "directory"));
        sp_tokenizer *t = NULL;
        assert_int_equal(sp_tokenizer_load_llama2c(paths[i], 512, &t, &err), SP_ERR_IO);
        char *buf;
        size_t len;
        assert_int_equal(sp_file_read(paths[i], "prompt file", 1 << 20, &buf, &len, &err), SP_ERR_IO);
        assert_non_null(strstr(err.msg, "prompt file"));
    }
    remove_odd(&o);
}

static void expect_cli_error(const char *args, const char *needle) {
    static char buf[1 << 14];
    int rc = cli_run(args, SP_CAPTURE_STDERR, buf, sizeof buf);
    if (rc == 0) fail_msg("'%s' succeeded", args);
    if (sp_count_lines(buf) != 1) fail_msg("'%s': %d lines on stderr: %s", args, sp_count_lines(buf), buf);
    if (!strstr(buf, needle)) fail_msg("'%s': stderr '%s' lacks '%s'", args, buf, needle);
}

static void test_cli_refuses_odd_files(void **state) {
    (void)state;
    odd_paths o;
    make_odd(&o);
    const char *m = sp_shared("models/stories260K.gguf");
    const char *bin = sp_shared("models/stories260K.bin");
    const char *paths[] = {o.dir, o.fifo};
    char a[4096];
    for (int i = 0; i < 2; i++) {
        const char *p = paths[i];
        snprintf(a, sizeof a, "generate -m '%s' -p hi -n 2", p);
        expect_cli_error(a, "model");
        snprintf(a, sizeof a, "generate -m '%s' -md '%s' -p hi -n 2", m, p);
        expect_cli_error(a, "model");
        snprintf(a, sizeof a, "generate -m '%s' -z '%s' -p hi -n 2", bin, p);
        expect_cli_error(a, "tokenizer");
        /* a GGUF has its own tokenizer: -z / -zd for one is refused, not ignored */
        snprintf(a, sizeof a, "generate -m '%s' -z '%s' -p hi -n 2", m, p);
        expect_cli_error(a, "-z: ");
        snprintf(a, sizeof a, "generate -m '%s' -md '%s' -zd '%s' -p hi -n 2", m, m, p);
        expect_cli_error(a, "-zd: ");
        snprintf(a, sizeof a, "tokenize -m '%s' -z '%s' -p hi", m, p);
        expect_cli_error(a, "-z: ");
        snprintf(a, sizeof a, "generate -m '%s' -f '%s' -n 2", m, p);
        expect_cli_error(a, "prompt file");
        snprintf(a, sizeof a, "bench -m '%s' --prompts '%s' -n 2", m, p);
        expect_cli_error(a, "prompt file");
    }
    remove_odd(&o);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sha256_vectors),
    cmocka_unit_test(test_shared_model_sums),
    cmocka_unit_test(test_library_refuses_odd_files),
    cmocka_unit_test(test_cli_refuses_odd_files),
};
SP_TEST_MAIN(tests)
