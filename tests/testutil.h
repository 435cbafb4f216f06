/* testutil.h: shared test scaffolding (cmocka). Each tests/test_*.c is its own
 * binary; SP_TEST_MAIN runs its tests and prints "SP_RESULT <passed> <failed>"
 * for scripts/run_tests.sh to sum. Model files come from ../shared (or
 * $SPECULA_SHARED); they are never copied into the repository. */
#ifndef SP_TESTUTIL_H
#define SP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Tests are white-box: besides the public API (specula.h) they see the
 * developer tooling (include/dev) and the internal headers they test. */
#include "dev/sp_mkmodel.h"
#include "dev/sp_vsim.h"
#include "gguf_write.h"
#include "quant.h"
#include "specula.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* Path of a file under the shared directory, e.g. sp_shared("models/stories260K.gguf"). */
static inline const char *sp_shared(const char *rel) {
    static char buf[8][1024];
    static int slot;
    const char *root = getenv("SPECULA_SHARED");
    char *b = buf[slot++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", root && *root ? root : "../shared", rel);
    return b;
}

/* A scratch directory for files the tests make (broken models etc.): one
 * fresh directory per test process under $TMPDIR (or /tmp), removed with
 * everything in it when the process that made it exits, so test binaries
 * can run in parallel and leave nothing behind. */
static char sp_tmpdir_path_[200];
static pid_t sp_tmpdir_owner_;

static inline int sp_tmpdir_rm_(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static inline void sp_tmpdir_cleanup_(void) {
    if (sp_tmpdir_path_[0] && getpid() == sp_tmpdir_owner_)
        nftw(sp_tmpdir_path_, sp_tmpdir_rm_, 16, FTW_DEPTH | FTW_PHYS);
}

static inline const char *sp_tmpdir(void) {
    if (!sp_tmpdir_path_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(sp_tmpdir_path_, sizeof sp_tmpdir_path_, "%s/specula-test-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(sp_tmpdir_path_)) {
            fprintf(stderr, "cannot make a temporary directory under %s\n", t && *t ? t : "/tmp");
            abort();
        }
        sp_tmpdir_owner_ = getpid();
        atexit(sp_tmpdir_cleanup_);
    }
    return sp_tmpdir_path_;
}

/* Writes to path a copy of the GGUF src whose tokenizer.ggml.eot_token_id is
 * eot (an end-of-generation id where the file has none); fails the test on
 * any error. */
static inline void sp_write_eot_copy(const char *src, const char *path, int32_t eot) {
    sp_error err = {0};
    sp_gguf *g = NULL;
    if (sp_gguf_open(src, &g, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer *w = sp_gguf_writer_init();
    sp_gguf_writer_copy_kv(w, g, NULL);
    sp_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)eot);
    for (uint64_t i = 0; i < sp_gguf_n_tensors(g); i++) {
        const sp_gguf_tensor *t = sp_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (sp_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, true, &err))
            fail_msg("%s", err.msg);
    }
    if (sp_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
    sp_gguf_writer_free(w);
    sp_gguf_close(g);
}

/* SP_TEST_FILTER=pattern runs only the matching tests (cmocka's filter; the
 * SP_RESULT count then still counts the whole table). */
#define SP_TEST_MAIN(tests)                                                          \
    int main(void) {                                                                 \
        int n_ = (int)(sizeof(tests) / sizeof((tests)[0]));                          \
        if (getenv("SP_TEST_FILTER")) cmocka_set_test_filter(getenv("SP_TEST_FILTER")); \
        int failed_ = cmocka_run_group_tests(tests, NULL, NULL);                     \
        printf("SP_RESULT %d %d\n", n_ - failed_, failed_);                          \
        return failed_ ? 1 : 0;                                                      \
    }

#endif
