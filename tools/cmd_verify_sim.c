/* cmd_verify_sim: `specula verify-sim`, the verifiers on toy models with
 * acceptance statistics and a chi-square losslessness check (sp_vsim.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dev/sp_vsim.h"

static void vsim_usage(FILE *f) {
    fprintf(f,
            "usage: specula verify-sim [options]\n"
            "  --verifier NAME   token|block|greedy|lenient|mc|mc-norep|naive|gbv|traversal\n"
            "                    (default block)\n"
            "  --lenience L      lenient only, in (0, 1] (LOSSY verifier; default 0.5)\n"
            "  --p P0,P1,...     context-free target distribution (with --q)\n"
            "  --q Q0,Q1,...     context-free draft distribution (same length as --p)\n"
            "  --markov V        random first-order Markov target and draft over V tokens\n"
            "                    (the default model: --markov 4)\n"
            "  --gamma G         draft length in [1, %d] (default 4; tree depth for --candidates)\n"
            "  --candidates K    mc/mc-norep/naive/gbv/traversal: K candidates at the first\n"
            "                    position, each continued by one drafted chain (default 2;\n"
            "                    for gbv: K i.i.d. draft paths)\n"
            "  --tree SHAPE      the same verifiers: draft tree like 2x2 (gamma = its depth)\n"
            "gbv and mc draw children i.i.d.; traversal and mc-norep without replacement.\n"
            "  --temp T          temperature for both toy models, T >= 0 (0 = argmax)\n"
            "  --trials N        outer-loop iterations from an empty context (default 10000)\n"
            "  --seed S          seed for the simulation (and --markov tables)\n"
            "  --exact           also the exact expected accepted length (token, block, mc,\n"
            "                    mc-norep, gbv, traversal; small V and depth): every draft\n"
            "                    enumerated, each verifier's branches followed exactly\n"
            "  --json            print one JSON object on one line\n"
            "Greedy verification is lossless only for argmax targets (use --temp 0).\n",
            SP_VERIFY_MAX_GAMMA);
}

/* What the flags say. */
typedef struct vsim_opts {
    sp_vsim_params prm;
    sp_tree_shape shape;  /* prm.tree points here when --tree is given */
    const char *p_str, *q_str, *tree_str;
    long long markov;
    double temp;
    bool json, have_gamma, have_cand, exact;
} vsim_opts;

static bool is_mc(sp_verifier v) {
    return v == SP_VERIFIER_MC || v == SP_VERIFIER_MC_NOREP || v == SP_VERIFIER_NAIVE ||
           v == SP_VERIFIER_GBV || v == SP_VERIFIER_TRAVERSAL;
}

/* Parses the flags; returns 0, -1 after --help, or 2 after one line. */
static int vsim_parse(int argc, char **argv, vsim_opts *o) {
    enum { O_VERIFIER = SP_OPT_CMD, O_LENIENCE, O_P, O_Q, O_MARKOV, O_GAMMA, O_CAND, O_TREE,
           O_TEMP, O_TRIALS, O_SEED, O_JSON, O_EXACT };
    static const struct option LONGOPTS[] = {
        {"verifier", required_argument, NULL, O_VERIFIER},
        {"lenience", required_argument, NULL, O_LENIENCE},
        {"p", required_argument, NULL, O_P},
        {"q", required_argument, NULL, O_Q},
        {"markov", required_argument, NULL, O_MARKOV},
        {"gamma", required_argument, NULL, O_GAMMA},
        {"candidates", required_argument, NULL, O_CAND},
        {"tree", required_argument, NULL, O_TREE},
        {"temp", required_argument, NULL, O_TEMP},
        {"trials", required_argument, NULL, O_TRIALS},
        {"seed", required_argument, NULL, O_SEED},
        {"json", no_argument, NULL, O_JSON},
        {"exact", no_argument, NULL, O_EXACT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->prm = sp_vsim_default_params();
    o->prm.verifier = SP_VERIFIER_BLOCK;
    o->prm.lenience = 0.5;
    o->temp = 1.0;
    const char *flag;
    long long v;
    int c;
    optind = 0;
    while ((c = cli_next(argc, argv, "h", LONGOPTS, "verify-sim", &flag)) != -1) {
        sp_error e = {0};
        switch (c) {
        case '?': return 2;
        case 'h': vsim_usage(stdout); return -1;
        case O_JSON: o->json = true; break;
        case O_EXACT: o->exact = true; break;
        case O_VERIFIER:
            if (sp_verifier_parse(optarg, &o->prm.verifier, &e)) {
                fprintf(stderr, "specula: %s: %s\n", flag, e.msg);
                return 2;
            }
            break;
        case O_LENIENCE:
            if (cli_float(flag, optarg, 1e-9, 1.0, &o->prm.lenience)) return 2;
            break;
        case O_P: o->p_str = optarg; break;
        case O_Q: o->q_str = optarg; break;
        case O_MARKOV:
            if (cli_int(flag, optarg, 2, SP_VSIM_MAX_VOCAB, &o->markov)) return 2;
            break;
        case O_GAMMA:
            if (cli_int(flag, optarg, 1, SP_VERIFY_MAX_GAMMA, &v)) return 2;
            o->prm.gamma = (int32_t)v;
            o->have_gamma = true;
            break;
        case O_CAND:
            if (cli_int(flag, optarg, 1, SP_TREE_MAX_NODES - 1, &v)) return 2;
            o->prm.candidates = (int32_t)v;
            o->have_cand = true;
            break;
        case O_TREE: o->tree_str = optarg; break;
        case O_TEMP:
            if (cli_float(flag, optarg, 0.0, 1e6, &o->temp)) return 2;
            break;
        case O_TRIALS:
            if (cli_int(flag, optarg, 1, SP_VSIM_MAX_TRIALS, &v)) return 2;
            o->prm.trials = v;
            break;
        case O_SEED:
            if (cli_int(flag, optarg, 0, 0x7fffffffffffffffLL, &v)) return 2;
            o->prm.seed = (uint64_t)v;
            break;
        default: return 2;
        }
    }
    return 0;
}

/* The combinations the flags allow; fills the tree shape. 0 or 2. */
static int vsim_check(vsim_opts *o) {
    const bool mc = is_mc(o->prm.verifier);
    if (!mc && (o->tree_str || o->have_cand)) {
        fprintf(stderr, "specula: --tree and --candidates need --verifier mc, mc-norep, naive, gbv or "
                        "traversal\n");
        return 2;
    }
    if (o->tree_str && (o->have_cand || o->have_gamma)) {
        fprintf(stderr, "specula: --tree sets the depth and branching; drop --gamma/--candidates\n");
        return 2;
    }
    if (o->tree_str) {
        sp_error e = {0};
        if (sp_tree_shape_parse(o->tree_str, &o->shape, &e)) {
            fprintf(stderr, "specula: --tree: %s\n", e.msg);
            return 2;
        }
        o->prm.tree = &o->shape;
    } else if (mc && (int64_t)o->prm.candidates * o->prm.gamma + 1 > SP_TREE_MAX_NODES) {
        fprintf(stderr, "specula: --candidates x --gamma must be at most %d\n", SP_TREE_MAX_NODES - 1);
        return 2;
    }
    if ((o->p_str || o->q_str) && o->markov) {
        fprintf(stderr, "specula: give either --p/--q or --markov, not both\n");
        return 2;
    }
    return 0;
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

/* The toy model the flags describe, at the requested temperature. 0, or 2
 * (bad input) / 1 (out of memory) after one line. */
static int vsim_model(const vsim_opts *o, sp_vsim_model *m) {
    sp_error e = {0};
    if (o->p_str || o->q_str) {
        double p[SP_VSIM_MAX_VOCAB], q[SP_VSIM_MAX_VOCAB];
        int np = parse_list("--p", o->p_str, p, SP_VSIM_MAX_VOCAB);
        if (np < 0) return 2;
        int nq = parse_list("--q", o->q_str, q, SP_VSIM_MAX_VOCAB);
        if (nq < 0) return 2;
        if (np != nq || np < 2) {
            fprintf(stderr, "specula: --p and --q need the same length >= 2 (got %d and %d)\n", np, nq);
            return 2;
        }
        if (sp_vsim_model_context_free(m, np, p, q, &e)) {
            fprintf(stderr, "specula: %s\n", e.msg);
            return e.code == SP_ERR_ARG ? 2 : 1;
        }
    } else if (sp_vsim_model_markov(m, o->markov ? (int32_t)o->markov : 4, o->prm.seed, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        return e.code == SP_ERR_ARG ? 2 : 1;
    }
    if (sp_vsim_model_temperature(m, o->temp, &e)) {
        fprintf(stderr, "specula: %s\n", e.msg);
        sp_vsim_model_free(m);
        return 2;
    }
    return 0;
}

static void vsim_print_json(const vsim_opts *o, const sp_vsim_result *r, const char *model, int32_t V,
                            double exact) {
    printf("{\"verifier\":\"%s\",\"model\":\"%s\",\"vocab\":%d,\"gamma\":%d,",
           sp_verifier_name(o->prm.verifier), model, (int)V, (int)r->depth);
    if (o->prm.verifier == SP_VERIFIER_LENIENT) printf("\"lenience\":%.17g,", o->prm.lenience);
    if (o->tree_str) printf("\"tree\":\"%s\",", o->tree_str);
    else if (is_mc(o->prm.verifier)) printf("\"candidates\":%d,", (int)o->prm.candidates);
    printf("\"temp\":%.17g,\"trials\":%lld,\"seed\":%llu,\"mean_accepted\":%.17g,"
           "\"block_efficiency\":%.17g,",
           o->temp, (long long)r->trials, (unsigned long long)o->prm.seed, r->mean_accepted,
           r->block_efficiency);
    if (!isnan(exact)) printf("\"exact_mean_accepted\":%.17g,", exact);
    printf("\"accept_hist\":[");
    for (int32_t i = 0; i <= r->depth; i++) printf("%s%lld", i ? "," : "", (long long)r->accept_hist[i]);
    printf("],\"check_len\":%d,\"check_exact\":%s,\"chi2\":%.17g,\"dof\":%d,\"p_value\":%.17g,"
           "\"impossible\":%lld}\n",
           (int)r->check_len, r->exact ? "true" : "false", r->chi2, (int)r->dof, r->p_value,
           (long long)r->impossible);
}

static void vsim_print_text(const vsim_opts *o, const sp_vsim_result *r, const char *model, int32_t V) {
    printf("verifier %s%s, %s model, V=%d, depth %d", sp_verifier_name(o->prm.verifier),
           o->prm.verifier == SP_VERIFIER_LENIENT ? " (LOSSY)" : "", model, (int)V, (int)r->depth);
    if (o->tree_str) printf(", tree %s", o->tree_str);
    else if (is_mc(o->prm.verifier)) printf(", %d candidates", (int)o->prm.candidates);
    printf(", temp %g, %lld trials, seed %llu\n", o->temp, (long long)r->trials,
           (unsigned long long)o->prm.seed);
    printf("mean accepted draft tokens %.5f\n", r->mean_accepted);
    printf("block efficiency           %.5f tokens/iteration\n", r->block_efficiency);
    printf("accepted-length histogram:");
    for (int32_t i = 0; i <= r->depth; i++) printf(" %d:%lld", (int)i, (long long)r->accept_hist[i]);
    printf("\n");
    if (r->exact)
        printf("losslessness: joint distribution of the first %d tokens (exact enumeration, %lld sequences)\n",
               (int)r->check_len, (long long)r->n_cells);
    else
        printf("losslessness: V^%d too many sequences; checking only the marginal of the first %d tokens\n",
               (int)(r->depth + 1), (int)r->check_len);
    printf("chi2 %.4f, dof %d, p-value %.4g%s\n", r->chi2, (int)r->dof, r->p_value,
           r->impossible ? " (impossible sequences observed)" : "");
}

int cmd_verify_sim(int argc, char **argv) {
    vsim_opts o = {0};
    int rc = vsim_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if ((rc = vsim_check(&o))) return rc;
    sp_vsim_model m = {0};
    if ((rc = vsim_model(&o, &m))) return rc;
    sp_vsim_result r;
    sp_error e = {0};
    sp_status st = sp_vsim_run(&m, &o.prm, &r, &e);
    double ex = NAN;
    if (!st && o.exact) st = sp_vsim_exact(&m, &o.prm, &ex, &e);
    const int32_t V = m.n_vocab;
    sp_vsim_model_free(&m);
    if (st) {
        fprintf(stderr, "specula: verify-sim: %s\n", e.msg);
        return st == SP_ERR_ARG || st == SP_ERR_UNSUPPORTED || st == SP_ERR_RANGE ? 2 : 1;
    }
    const char *model = (o.p_str || o.q_str) ? "context-free" : "markov";
    if (o.json) {
        vsim_print_json(&o, &r, model, V, ex);
    } else {
        vsim_print_text(&o, &r, model, V);
        if (o.exact) {
            double var = 0;
            for (int32_t i = 0; i <= r.depth; i++)
                var += ((double)i - r.mean_accepted) * ((double)i - r.mean_accepted) *
                       (double)r.accept_hist[i];
            const double se = sqrt(var / (double)r.trials / (double)r.trials);
            printf("exact mean accepted %.6f (block efficiency %.6f); sampled - exact = %+.5f "
                   "(%.1f standard errors)\n",
                   ex, ex + 1, r.mean_accepted - ex, se > 0 ? (r.mean_accepted - ex) / se : 0.0);
        }
    }
    return 0;
}
