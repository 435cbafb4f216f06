/* Tests of scripts/check_layers.sh: it passes on this tree, and on a copy
 * of the tree with one bad include injected (a back-edge to a higher layer,
 * another folder's internal header, an internal header in a tool or in a
 * public header) or with README.md stating another layer order, it fails
 * and names the offence. */
#include "testutil.h"

#include <libgen.h>
#include <sys/wait.h>
#include <unistd.h>

/* The checkout: two folders above the test binary (build/tests/test_layers). */
static const char *repo(void) {
    static char root[1024];
    if (root[0]) return root;
    char exe[900];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = 0;
    snprintf(root, sizeof root, "%s/../..", dirname(exe));
    return root;
}

static int sh(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(out, 1, cap - 1, f);
    out[len] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* A fresh copy of the parts of the tree the script reads, in TMP/NAME. */
static const char *copy_tree(const char *name) {
    static char dir[512];
    char cmd[8192], out[256];
    snprintf(dir, sizeof dir, "%s/%s", sp_tmpdir(), name);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cd '%s' && cp -r Makefile README.md docs include src tools '%s'/ "
             "&& { [ ! -d examples ] || cp -r examples '%s'/; }",
             dir, repo(), dir, dir);
    assert_int_equal(sh(cmd, out, sizeof out), 0);
    return dir;
}

static int check(const char *dir, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "sh '%s/scripts/check_layers.sh' '%s' 2>&1", repo(), dir);
    return sh(cmd, out, cap);
}

/* Appends `line` to dir/file. */
static void inject(const char *dir, const char *file, const char *line) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fprintf(f, "%s\n", line);
    fclose(f);
}

static void test_tree_passes(void **state) {
    (void)state;
    char out[8192];
    int rc = check(repo(), out, sizeof out);
    if (rc) fprintf(stderr, "%s", out);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "");
}

static void test_back_edge_fails(void **state) {
    (void)state;
    char out[8192];
    const char *d = copy_tree("back");
    assert_int_equal(check(d, out, sizeof out), 0); /* the copy alone passes */
    inject(d, "src/base/rng.c", "#include \"sp_spec.h\"");
    assert_int_equal(check(d, out, sizeof out), 1);
    assert_non_null(strstr(out, "src/base/rng.c (base) includes sp_spec.h (spec), a layer above it"));
    assert_int_equal(count_lines(out), 1);
}

static void test_internal_header_fails(void **state) {
    (void)state;
    char out[8192];
    const char *d = copy_tree("internal");
    inject(d, "src/spec/tree.c", "#include \"kv.h\"");           /* below, but not an interface */
    inject(d, "tools/cli_util.c", "#include \"ops.h\"");         /* a tool past the public API */
    inject(d, "include/sp_model.h", "#include \"model_internal.h\""); /* a public header */
    assert_int_equal(check(d, out, sizeof out), 1);
    assert_non_null(strstr(out, "src/spec/tree.c includes kv.h, internal to src/engine"));
    assert_non_null(strstr(out, "tools/cli_util.c includes ops.h, internal to src/engine"));
    assert_non_null(strstr(out, "include/sp_model.h includes model_internal.h"));
    assert_int_equal(count_lines(out), 3);
}

static void test_stated_order_checked(void **state) {
    (void)state;
    char out[8192], cmd[2048];
    const char *d = copy_tree("order");
    snprintf(cmd, sizeof cmd, "sed -i 's/base -> text -> engine/base -> engine -> text/' '%s/README.md'", d);
    assert_int_equal(sh(cmd, out, sizeof out), 0);
    assert_int_equal(check(d, out, sizeof out), 1);
    assert_non_null(strstr(out, "README.md does not state the layer order"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tree_passes),
    cmocka_unit_test(test_back_edge_fails),
    cmocka_unit_test(test_internal_header_fails),
    cmocka_unit_test(test_stated_order_checked),
};

SP_TEST_MAIN(tests)
