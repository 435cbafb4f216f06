/* cmd_run: `specula run`, the demo: greedy speculative generation on the
 * default model (stories260K) with its own Q8_0 copy as the draft unless
 * another drafter is given, then plain decoding of the same prompt for the
 * speedup measured in the same run.
 *
 * The default model is looked up in $SPECULA_MODEL, then
 * $SPECULA_SHARED/models and ../shared/models, then ~/.cache/specula;
 * otherwise its llama2.c files are downloaded into that cache. No path ever
 * goes through a shell: curl runs with an argument vector and writes to a
 * temporary file opened here, whose SHA-256 must equal the published sum
 * before it is renamed to its final name. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_generate.h"
#include "file.h"
#include "specula.h"

#define DEFAULT_URL_BASE "https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/"

/* The files of the default model and their SHA-256 (../shared/models/README.md). */
static const struct default_file {
    const char *name, *sha256;
} DEFAULT_FILES[2] = {
    {"stories260K.bin", "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"},
    {"tok512.bin", "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"},
};

static bool exists(const char *p) { return access(p, R_OK) == 0; }

/* Runs curl on url with its output going to fd. Returns 0, or -1 after
 * printing one line. */
static int curl_to_fd(const char *url, int fd) {
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "specula: cannot start curl: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        if (dup2(fd, STDOUT_FILENO) < 0) _exit(126);
        char *const args[] = {"curl", "-fsSL", "--proto", "=https", "--connect-timeout", "10",
                              (char *)url, NULL};
        execvp("curl", args);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "specula: waiting for curl: %s\n", strerror(errno));
            return -1;
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        fprintf(stderr, "specula: curl is not installed (scripts/setup.sh installs it)\n");
    else
        fprintf(stderr, "specula: downloading %s failed (curl %s %d)\n", url,
                WIFEXITED(status) ? "exit code" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return -1;
}

/* Downloads one default file into dir/name: to a temporary file in dir,
 * checked against its sum, then renamed. 0, or -1 after one line (no file
 * left behind). */
static int fetch_file(const char *dir, const struct default_file *f) {
    char tmp[4096], dst[4096], url[512], hex[65];
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, f->name);
    snprintf(dst, sizeof dst, "%s/%s", dir, f->name);
    snprintf(url, sizeof url, "%s%s", DEFAULT_URL_BASE, f->name);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "specula: cannot create a file in %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int rc = curl_to_fd(url, fd);
    if (close(fd) && !rc) {
        fprintf(stderr, "specula: writing %s: %s\n", tmp, strerror(errno));
        rc = -1;
    }
    sp_error err = {0};
    if (!rc && sp_file_sha256(tmp, "download", hex, &err)) {
        fprintf(stderr, "specula: %s\n", err.msg);
        rc = -1;
    }
    if (!rc && strcmp(hex, f->sha256)) {
        fprintf(stderr, "specula: the downloaded %s has SHA-256 %s, not the published %s; not used\n",
                f->name, hex, f->sha256);
        rc = -1;
    }
    if (!rc && rename(tmp, dst)) {
        fprintf(stderr, "specula: cannot rename %s to %s: %s\n", tmp, dst, strerror(errno));
        rc = -1;
    }
    if (rc) unlink(tmp);
    return rc;
}

/* Fills model (and tokz, "" when the model holds its tokenizer) with the
 * default model's paths, downloading it when it is nowhere. 0 or -1 after
 * one line. */
static int find_default_model(char *model, char *tokz, size_t cap) {
    const char *env = getenv("SPECULA_MODEL");
    if (env && *env) {
        snprintf(model, cap, "%s", env);
        tokz[0] = 0;
        return 0;
    }
    const char *shared = getenv("SPECULA_SHARED");
    const char *roots[2] = {shared, "../shared"};
    for (int i = 0; i < 2; i++) {
        if (!roots[i] || !*roots[i]) continue;
        snprintf(model, cap, "%s/models/stories260K.gguf", roots[i]);
        tokz[0] = 0;
        if (exists(model)) return 0;
    }
    const char *home = getenv("HOME");
    char dir[2048];
    if (snprintf(dir, sizeof dir, "%s/.cache/specula", home && *home ? home : "/tmp") >=
        (int)sizeof dir) {
        fprintf(stderr, "specula: $HOME is too long for the model cache path\n");
        return -1;
    }
    snprintf(model, cap, "%s/%s", dir, DEFAULT_FILES[0].name);
    snprintf(tokz, cap, "%s/%s", dir, DEFAULT_FILES[1].name);
    if (exists(model) && exists(tokz)) return 0;
    fprintf(stderr, "specula: downloading the default model (stories260K) into %s\n", dir);
    if (cli_make_dirs(dir)) {
        fprintf(stderr, "specula: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        const char *path = i ? tokz : model;
        if (!exists(path) && fetch_file(dir, &DEFAULT_FILES[i])) {
            fprintf(stderr, "specula: could not download the default model; set SPECULA_MODEL to "
                            "a GGUF file or put the shared directory beside this checkout\n");
            return -1;
        }
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    char model[4096], tokz[4096];
    /* the demo's defaults: greedy, the target's Q8_0 copy as the draft */
    sp_spec_params base = sp_spec_default_params();
    base.draft.kind = SP_DRAFT_LOWBIT;
    base.draft.lowbit_type = SP_GGML_Q8_0;
    sp_gen_opts o;
    sp_gen_opts_init(&o, &base);
    o.run.sampling.temperature = 0;
    int rc = sp_gen_parse(argc, argv, &o, "run", false);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.run.model) {
        if (find_default_model(model, tokz, sizeof model)) return 1;
        o.run.model = model;
        if (tokz[0]) o.run.tokenizer = tokz;
    }
    if (!o.prompt && !o.prompt_file) o.prompt = "Once upon a time";
    sp_gen_result spec_res;
    if ((rc = sp_gen_main(&o, &spec_res)) || o.spec.draft.kind == SP_DRAFT_NONE || o.json) return rc;
    /* the comparison: both ways REPEATS more times, quietly, best of each
     * (a 128-token run takes milliseconds here; one run is noise) */
    enum { REPEATS = 5 };
    sp_gen_opts spec = o, plain = o;
    spec.quiet = plain.quiet = true;
    plain.spec = sp_spec_default_params();
    plain.run.draft_model = NULL;
    double best_spec = spec_res.tokens_per_second, best_plain = 0;
    for (int r = 0; r < REPEATS; r++) {
        sp_gen_result a, b;
        if ((rc = sp_gen_main(&plain, &a)) || (rc = sp_gen_main(&spec, &b))) return rc;
        best_plain = a.tokens_per_second > best_plain ? a.tokens_per_second : best_plain;
        if (b.tokens_per_second > best_spec) best_spec = b.tokens_per_second, spec_res = b;
    }
    const sp_spec_stats *st = &spec_res.spec;
    const double speedup = best_plain > 0 ? best_spec / best_plain : 0;
    const int64_t plain_iters = st->gamma_hist[0], spec_iters = st->iterations - plain_iters;
    fprintf(stderr, "\n[run] plain decoding %.0f tokens/s, speculative (%s draft, %s verification) %.0f tokens/s: "
            "%.2fx (best of %d plain and %d speculative runs)\n", best_plain,
            sp_drafter_name(o.spec.draft.kind), sp_verifier_name(o.spec.verifier), best_spec, speedup,
            REPEATS, REPEATS + 1);
    fprintf(stderr, "[run] drafts: %lld tokens proposed, %lld accepted (%.0f%%); %.2f tokens per target forward\n",
            (long long)st->drafted, (long long)st->accepted, 100 * sp_spec_acceptance_rate(st),
            sp_spec_block_efficiency(st));
    if (o.spec.adaptive && plain_iters > spec_iters)
        fprintf(stderr,
                "[run] What happened: the adaptive controller measured that on this model a draft costs "
                "about as much as it saves, so it decoded plainly in %lld of %lld steps and drafted only to "
                "re-check now and then; the output is exactly what plain decoding gives, and speculation "
                "pays on larger, memory-bound models (see docs/RESULTS.md).\n",
                (long long)plain_iters, (long long)st->iterations);
    else if (o.spec.adaptive)
        fprintf(stderr,
                "[run] What happened: the adaptive controller found drafting pays here and drafted in "
                "%lld of %lld steps, choosing each draft's length from measured costs and acceptance.\n",
                (long long)spec_iters, (long long)st->iterations);
    else
        fprintf(stderr, "[run] The draft length was fixed at %d (give no --gamma to let the adaptive "
                "controller choose it, 0 included).\n", o.spec.gamma);
    return 0;
}
