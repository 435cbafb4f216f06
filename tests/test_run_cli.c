/* End-to-end tests of `specula run` finding no model and downloading the
 * default one, without a network: a fake `curl` first on PATH writes known
 * bytes. The published files are accepted and used; wrong bytes are refused
 * by their SHA-256 and leave nothing behind; a HOME holding shell syntax
 * runs nothing (no path goes through a shell); a missing curl is one clear
 * line. The binary runs with a controlled environment (fork/execve), in a
 * scratch directory with no ../shared beside it. */
#include "cli_testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "file.h"

static char g_root[512];

static void remove_root(void) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
}

static void write_exec(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

/* The fake curl: the last argument is the URL; FAKE_MODE good serves the
 * real files from FAKE_SRC, anything else serves garbage. Every argument is
 * logged on its own line. */
static const char FAKE_CURL[] =
    "#!/bin/sh\n"
    "for a; do printf '%s\\n' \"$a\" >> \"$FAKE_LOG\"; url=$a; done\n"
    "if [ \"$FAKE_MODE\" != good ]; then echo 'not the model'; exit 0; fi\n"
    "case \"$url\" in\n"
    "  */stories260K.bin) exec cat \"$FAKE_SRC/stories260K.bin\";;\n"
    "  */tok512.bin) exec cat \"$FAKE_SRC/tok512.bin\";;\n"
    "esac\n"
    "exit 22\n";

#define EVIL_HOME "h'; touch FILE; echo '"

typedef struct run_env {
    char bin[1024], work[1024], home[1024], cache[1200], log[1024], src[PATH_MAX];
} run_env;

static void setup(run_env *e) {
    snprintf(g_root, sizeof g_root, "%s/sp_run_test_XXXXXX", sp_tmpdir());
    assert_non_null(mkdtemp(g_root));
    atexit(remove_root);
    snprintf(e->bin, sizeof e->bin, "%s/bin", g_root);
    snprintf(e->work, sizeof e->work, "%s/work", g_root);
    snprintf(e->home, sizeof e->home, "%s/%s", g_root, EVIL_HOME);
    snprintf(e->cache, sizeof e->cache, "%s/.cache/specula", e->home);
    snprintf(e->log, sizeof e->log, "%s/curl.log", g_root);
    assert_int_equal(mkdir(e->bin, 0755), 0);
    assert_int_equal(mkdir(e->work, 0755), 0);
    char curl[1100];
    snprintf(curl, sizeof curl, "%s/curl", e->bin);
    write_exec(curl, FAKE_CURL);
    assert_non_null(realpath(sp_shared("models"), e->src));
}

/* Runs `specula run -n 8` in e->work with PATH = path; stdout and stderr
 * into out/err. Returns the exit code. */
static int run_specula(const run_env *e, const char *path, const char *mode, char *out, char *err,
                       size_t cap) {
    char fout[1100], ferr[1100];
    snprintf(fout, sizeof fout, "%s/stdout", g_root);
    snprintf(ferr, sizeof ferr, "%s/stderr", g_root);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(fout, O_WRONLY | O_CREAT | O_TRUNC, 0644), x = open(ferr, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || x < 0 || dup2(o, 1) < 0 || dup2(x, 2) < 0 || chdir(e->work)) _exit(125);
        char ev[6][PATH_MAX + 32];
        snprintf(ev[0], sizeof ev[0], "PATH=%s", path);
        snprintf(ev[1], sizeof ev[1], "HOME=%s", e->home);
        snprintf(ev[2], sizeof ev[2], "FAKE_SRC=%s", e->src);
        snprintf(ev[3], sizeof ev[3], "FAKE_LOG=%s", e->log);
        snprintf(ev[4], sizeof ev[4], "FAKE_MODE=%s", mode);
        snprintf(ev[5], sizeof ev[5], "SPECULA_SHARED=%s/nowhere", g_root);
        char *envp[] = {ev[0], ev[1], ev[2], ev[3], ev[4], ev[5], NULL};
        char *argv[] = {(char *)cli_bin(), "run", "-n", "8", NULL};
        execve(argv[0], argv, envp);
        _exit(126);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    FILE *f = fopen(fout, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    f = fopen(ferr, "r");
    n = f ? fread(err, 1, cap - 1, f) : 0;
    err[n] = 0;
    if (f) fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Entries of dir (0 if it does not exist). */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* Nothing the shell syntax in HOME would have made, anywhere we look. */
static void assert_no_injection(const run_env *e) {
    char p[1200];
    const char *dirs[] = {e->work, g_root, e->home};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/FILE", dirs[i]);
        if (access(p, F_OK) == 0) fail_msg("%s exists: HOME went through a shell", p);
    }
}

static void test_download(void **state) {
    (void)state;
    run_env e;
    setup(&e);
    static char out[1 << 16], err[1 << 16];
    char path[2200];
    snprintf(path, sizeof path, "%s:/usr/bin:/bin", e.bin);

    /* wrong bytes: refused by the sum, nothing left in the cache */
    int rc = run_specula(&e, path, "bad", out, err, sizeof out);
    if (rc != 1 || !strstr(err, "SHA-256")) fail_msg("bad download: rc %d, stderr %s", rc, err);
    assert_int_equal(count_entries(e.cache), 0);
    assert_no_injection(&e);
    /* curl got the URL as one argument of its own */
    FILE *f = fopen(e.log, "r");
    assert_non_null(f);
    char line[1024];
    bool url = false;
    while (fgets(line, sizeof line, f))
        url |= !strcmp(line, "https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/"
                             "stories260K.bin\n");
    fclose(f);
    assert_true(url);

    /* no curl at all: one clear line */
    char empty[1100];
    snprintf(empty, sizeof empty, "%s/work", g_root);
    rc = run_specula(&e, empty, "good", out, err, sizeof out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "curl is not installed"));
    assert_int_equal(count_entries(e.cache), 0);

    /* the published files: accepted, renamed into the cache, used */
    rc = run_specula(&e, path, "good", out, err, sizeof out);
    if (rc != 0) fail_msg("good download: rc %d, stderr %s", rc, err);
    assert_non_null(strstr(out, "Once upon a time, there was a little girl"));
    assert_int_equal(count_entries(e.cache), 2); /* no temporary file left */
    char p[1400], hex[65];
    sp_error se = {0};
    snprintf(p, sizeof p, "%s/stories260K.bin", e.cache);
    assert_int_equal(sp_file_sha256(p, "model", hex, &se), SP_OK);
    assert_string_equal(hex, "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
    assert_no_injection(&e);

    /* found in the cache the next time: curl is not run again */
    assert_int_equal(unlink(e.log), 0);
    rc = run_specula(&e, path, "bad", out, err, sizeof out);
    assert_int_equal(rc, 0);
    assert_int_equal(access(e.log, F_OK), -1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_download),
};
SP_TEST_MAIN(tests)
