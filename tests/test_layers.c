/* Tests of scripts/check_layers.sh and scripts/check_api.sh: they pass on
 * this tree; on a copy of the tree with one bad include injected (a
 * back-edge to a higher layer, another folder's internal header, an
 * internal header in a tool or in a public header) or with README.md
 * stating another layer order, check_layers fails and names the offence;
 * with a function declaration added to a public header, or a header
 * DESIGN.md does not list, check_api fails. */
#include "cli_testutil.h"

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

/* A fresh copy of the parts of the tree the script reads, in TMP/NAME. */
static const char *copy_tree(const char *name) {
    static char dir[512];
    char cmd[8192], out[256];
    snprintf(dir, sizeof dir, "%s/%s", sp_tmpdir(), name);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cd '%s' && cp -r Makefile README.md docs include src tools '%s'/ "
             "&& { [ ! -d examples ] || cp -r examples '%s'/; }",
             dir, repo(), dir, dir);
    assert_int_equal(sh_capture(cmd, out, sizeof out), 0);
    return dir;
}

static int check_script(const char *script, const char *dir, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "sh '%s/scripts/%s' '%s' 2>&1", repo(), script, dir);
    return sh_capture(cmd, out, cap);
}

static int check(const char *dir, char *out, size_t cap) {
    return check_script("check_layers.sh", dir, out, cap);
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
    assert_non_null(strstr(out, "src/base/rng.c (base) includes sp_spec.h (speculation), a layer above it"));
    assert_int_equal(sp_count_lines(out), 1);
}

static void test_internal_header_fails(void **state) {
    (void)state;
    char out[8192];
    const char *d = copy_tree("internal");
    inject(d, "src/speculation/tree.c", "#include \"kv.h\"");           /* below, but not an interface */
    inject(d, "tools/cli_util.c", "#include \"ops.h\"");         /* a tool past the public API */
    inject(d, "include/sp_model.h", "#include \"model_internal.h\""); /* a public header */
    inject(d, "include/sp_sampler.h", "#include <jansson.h>");   /* a third-party type */
    inject(d, "examples/simple.c", "#include \"rng.h\"");      /* tools may, examples not */
    inject(d, "tools/cli_util.c", "#include \"rng.h\"");       /* an interface for tools: fine */
    assert_int_equal(check(d, out, sizeof out), 1);
    assert_non_null(strstr(out, "src/speculation/tree.c includes kv.h, internal to src/engine"));
    assert_non_null(strstr(out, "tools/cli_util.c includes ops.h, internal to src/engine"));
    assert_non_null(strstr(out, "include/sp_model.h includes model_internal.h"));
    assert_non_null(strstr(out, "include/sp_sampler.h includes <jansson.h>"));
    assert_non_null(strstr(out, "examples/simple.c includes rng.h: an example uses the public API"));
    assert_int_equal(sp_count_lines(out), 5);
}

static void test_stated_order_checked(void **state) {
    (void)state;
    char out[8192], cmd[2048];
    const char *d = copy_tree("order");
    snprintf(cmd, sizeof cmd, "sed -i 's/base -> text -> engine/base -> engine -> text/' '%s/README.md'", d);
    assert_int_equal(sh_capture(cmd, out, sizeof out), 0);
    assert_int_equal(check(d, out, sizeof out), 1);
    assert_non_null(strstr(out, "README.md does not state the layer order"));
}

static void test_api_count_checked(void **state) {
    (void)state;
    char out[8192];
    assert_int_equal(check_script("check_api.sh", repo(), out, sizeof out), 0);
    assert_string_equal(out, "");
    const char *d = copy_tree("api");
    inject(d, "include/sp_generate.h", "double sp_generate_extra(void);");
    inject(d, "include/sp_extra.h", "int sp_extra(void);");
    assert_int_equal(check_script("check_api.sh", d, out, sizeof out), 1);
    printf("%s", out);
    assert_non_null(strstr(out, "sp_generate.h has 4 function declarations, the table says 3"));
    assert_non_null(strstr(out, "no row for sp_extra.h (1 function declarations)"));
    /* the totals DESIGN states (checked equal to the headers above), plus
     * the injected header and its two functions */
    char path[4096 + 32], line[256], want[160];
    int nh = -1, nf = -1;
    snprintf(path, sizeof path, "%s/docs/DESIGN.md", repo());
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) && nh < 0)
        if (sscanf(line, "The public API: %d headers, %d function declarations", &nh, &nf) != 2) nh = -1;
    fclose(f);
    assert_true(nh > 0 && nf > 0);
    snprintf(want, sizeof want, "the headers make 'The public API: %d headers, %d function declarations'", nh + 1,
             nf + 2);
    assert_non_null(strstr(out, want));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tree_passes),
    cmocka_unit_test(test_back_edge_fails),
    cmocka_unit_test(test_internal_header_fails),
    cmocka_unit_test(test_stated_order_checked),
    cmocka_unit_test(test_api_count_checked),
};

SP_TEST_MAIN(tests)
