/* cmd_verify_sim: `specula verify-sim`, the verifiers on toy models with
 * acceptance statistics and a chi-square losslessness check (sp_vsim.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sp_vsim.h"

static void vsim_usage(FILE *f) {
    fprintf(f,
            "usage: specula verify-sim [options]\n"
            "  --verifier NAME   token|block|greedy|lenient|mc|mc-norep|naive (default block)\n"
            "  --lenience L      lenient only, in (0, 1] (LOSSY verifier; default 0.5)\n"
            "  --p P0,P1,...     context-free target distribution (with --q)\n"
            "  --q Q0,Q1,...     context-free draft distribution (same length as --p)\n"
            "  --markov V        random first-order Markov target and draft over V tokens\n"
            "                    (the default model: --markov 4)\n"
            "  --gamma G         draft length in [1, %d] (default 4; tree depth for --candidates)\n"
            "  --candidates K    mc/mc-norep/naive: K candidates at the first position,\n"
            "                    each continued by one drafted chain (default 2)\n"
            "  --tree SHAPE      mc/mc-norep/naive: draft tree like 2x2 (gamma = its depth)\n"
            "  --temp T          temperature for both toy models, T >= 0 (0 = argmax)\n"
            "  --trials N        outer-loop iterations from an empty context (default 10000)\n"
            "  --seed S          seed for the simulation (and --markov tables)\n"
            "  --json            print one JSON object on one line\n"
            "Greedy verification is lossless only for argmax targets (use --temp 0).\n",
            SP_VERIFY_MAX_GAMMA);
}

/* Parse "a,b,c" into out[cap]; returns the count or -1 after printing. */
static int parse_list(const char *flag, const char *s, double *out, int cap) {
    if (!s || !*s) {
        fprintf(stderr, "specula: %s needs a comma-separated list of probabilities\n", flag);
        return -1;
    }
    int n = 0;
    const char *c = s;
    for (;;) {
        char *end;
        double v = strtod(c, &end);
        if (end == c || !isfinite(v) || v < 0.0 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "specula: %s: '%s' is not a list of probabilities\n", flag, s);
            return -1;
        }
        if (n >= cap) {
            fprintf(stderr, "specula: %s: more than %d entries\n", flag, cap);
            return -1;
        }
        out[n++] = v;
        if (*end == '\0') break;
        c = end + 1;
    }
    return n;
}

int cmd_verify_sim(int argc, char **argv) {
    sp_vsim_params prm = sp_vsim_default_params();
    prm.verifier = SP_VERIFIER_BLOCK;
    prm.lenience = 0.5;
    const char *p_str = NULL, *q_str = NULL, *tree_str = NULL;
    long long markov = 0, v;
    double temp = 1.0;
    int json = 0, have_gamma = 0, have_cand = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            vsim_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(a, "--verifier")) {
            sp_error e = {0};
            if (!val || sp_verifier_parse(val, &prm.verifier, &e)) {
                fprintf(stderr, "specula: --verifier: %s\n", val ? e.msg : "needs a value");
                return 2;
            }
        } else if (!strcmp(a, "--lenience")) {
            if (sp_cli_float(a, val, 1e-9, 1.0, &prm.lenience)) return 2;
        } else if (!strcmp(a, "--p")) {
            p_str = val;
        } else if (!strcmp(a, "--q")) {
            q_str = val;
        } else if (!strcmp(a, "--markov")) {
            if (sp_cli_int(a, val, 2, SP_VSIM_MAX_VOCAB, &markov)) return 2;
        } else if (!strcmp(a, "--gamma")) {
            if (sp_cli_int(a, val, 1, SP_VERIFY_MAX_GAMMA, &v)) return 2;
            prm.gamma = (int32_t)v;
            have_gamma = 1;
        } else if (!strcmp(a, "--candidates")) {
            if (sp_cli_int(a, val, 1, SP_TREE_MAX_NODES - 1, &v)) return 2;
            prm.candidates = (int32_t)v;
            have_cand = 1;
        } else if (!strcmp(a, "--tree")) {
            tree_str = val;
        } else if (!strcmp(a, "--temp")) {
            if (sp_cli_float(a, val, 0.0, 1e6, &temp)) return 2;
        } else if (!strcmp(a, "--trials")) {
            if (sp_cli_int(a, val, 1, SP_VSIM_MAX_TRIALS, &v)) return 2;
            prm.trials = v;
        } else if (!strcmp(a, "--seed")) {
            if (sp_cli_int(a, val, 0, 0x7fffffffffffffffLL, &v)) return 2;
            prm.seed = (uint64_t)v;
        } else {
            fprintf(stderr, "specula: verify-sim: unknown option '%s' (try --help)\n", a);
            return 2;
        }
        if (!val) {
            fprintf(stderr, "specula: %s needs a value\n", a);
            return 2;
        }
        i++;
    }
    const int is_mc = prm.verifier == SP_VERIFIER_MC || prm.verifier == SP_VERIFIER_MC_NOREP ||
                      prm.verifier == SP_VERIFIER_NAIVE;
    if (!is_mc && (tree_str || have_cand)) {
        fprintf(stderr, "specula: --tree and --candidates need --verifier mc, mc-norep or naive\n");
        return 2;
    }
    if (tree_str && (have_cand || have_gamma)) {
        fprintf(stderr, "specula: --tree sets the depth and branching; drop --gamma/--candidates\n");
        return 2;
    }
    sp_tree_shape shape;
    if (tree_str) {
        sp_error e = {0};
        if (sp_tree_shape_parse(tree_str, &shape, &e)) {
            fprintf(stderr, "specula: --tree: %s\n", e.msg);
            return 2;
        }
        prm.tree = &shape;
    } else if (is_mc && (int64_t)prm.candidates * prm.gamma + 1 > SP_TREE_MAX_NODES) {
        fprintf(stderr, "specula: --candidates x --gamma must be at most %d\n", SP_TREE_MAX_NODES - 1);
        return 2;
    }
    if ((p_str || q_str) && markov) {
        fprintf(stderr, "specula: give either --p/--q or --markov, not both\n");
        return 2;
    }
    sp_vsim_model m = {0};
    sp_error e = {0};
    if (p_str || q_str) {
        double p[SP_VSIM_MAX_VOCAB], q[SP_VSIM_MAX_VOCAB];
        int np = parse_list("--p", p_str, p, SP_VSIM_MAX_VOCAB);
        if (np < 0) return 2;
        int nq = parse_list("--q", q_str, q, SP_VSIM_MAX_VOCAB);
        if (nq < 0) return 2;
        if (np != nq || np < 2) {
            fprintf(stderr, "specula: --p and --q need the same length >= 2 (got %d and %d)\n", np, nq);
            return 2;
        }
        if (sp_vsim_model_context_free(&m, np, p, q, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            return 2;
        }
    } else {
        if (!markov) markov = 4;
        if (sp_vsim_model_markov(&m, (int32_t)markov, prm.seed, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            return e.code == SP_ERR_ARG ? 2 : 1;
        }
    }
    if (sp_vsim_model_temperature(&m, temp, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        sp_vsim_model_free(&m);
        return 2;
    }
    sp_vsim_result r;
    sp_status st = sp_vsim_run(&m, &prm, &r, &e);
    int32_t V = m.n_vocab;
    sp_vsim_model_free(&m);
    if (st) {
        fprintf(stderr, "specula: verify-sim: %s\n", e.msg);
        return st == SP_ERR_ARG ? 2 : 1;
    }
    const char *model = (p_str || q_str) ? "context-free" : "markov";
    if (json) {
        printf("{\"verifier\":\"%s\",\"model\":\"%s\",\"vocab\":%d,\"gamma\":%d,", sp_verifier_name(prm.verifier),
               model, (int)V, (int)r.depth);
        if (prm.verifier == SP_VERIFIER_LENIENT) printf("\"lenience\":%.17g,", prm.lenience);
        if (tree_str) printf("\"tree\":\"%s\",", tree_str);
        else if (is_mc) printf("\"candidates\":%d,", (int)prm.candidates);
        printf("\"temp\":%.17g,\"trials\":%lld,\"seed\":%llu,\"mean_accepted\":%.17g,"
               "\"block_efficiency\":%.17g,\"accept_hist\":[",
               temp, (long long)r.trials, (unsigned long long)prm.seed, r.mean_accepted,
               r.block_efficiency);
        for (int32_t i = 0; i <= r.depth; i++) printf("%s%lld", i ? "," : "", (long long)r.accept_hist[i]);
        printf("],\"check_len\":%d,\"check_exact\":%s,\"chi2\":%.17g,\"dof\":%d,\"p_value\":%.17g,"
               "\"impossible\":%lld}\n",
               (int)r.check_len, r.exact ? "true" : "false", r.chi2, (int)r.dof, r.p_value,
               (long long)r.impossible);
        return 0;
    }
    printf("verifier %s%s, %s model, V=%d, depth %d", sp_verifier_name(prm.verifier),
           prm.verifier == SP_VERIFIER_LENIENT ? " (LOSSY)" : "", model, (int)V, (int)r.depth);
    if (tree_str) printf(", tree %s", tree_str);
    else if (is_mc) printf(", %d candidates", (int)prm.candidates);
    printf(", temp %g, %lld trials, seed %llu\n", temp, (long long)r.trials,
           (unsigned long long)prm.seed);
    printf("mean accepted draft tokens %.5f\n", r.mean_accepted);
    printf("block efficiency           %.5f tokens/iteration\n", r.block_efficiency);
    printf("accepted-length histogram:");
    for (int32_t i = 0; i <= r.depth; i++) printf(" %d:%lld", (int)i, (long long)r.accept_hist[i]);
    printf("\n");
    if (r.exact)
        printf("losslessness: joint distribution of the first %d tokens (exact enumeration, %lld sequences)\n",
               (int)r.check_len, (long long)r.n_cells);
    else
        printf("losslessness: V^%d too many sequences; checking only the marginal of the first %d tokens\n",
               (int)(r.depth + 1), (int)r.check_len);
    printf("chi2 %.4f, dof %d, p-value %.4g%s\n", r.chi2, (int)r.dof, r.p_value,
           r.impossible ? " (impossible sequences observed)" : "");
    return 0;
}
