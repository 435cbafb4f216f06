/* Tests of the speculation-config layer (sp_spec.h): every setting
 * from text and from JSON lands in the right field; bad values, unknown
 * keys, wrong JSON types and combinations that make no sense are refused
 * with a message naming the setting (never a command-line flag); the
 * finishing rules; the batch and context a configuration needs; the checks
 * against a model; the low-bit type contract with sp_quant_supported; and
 * UTF-8 repair of generated text. */
#include "spec_testutil.h"
#include "utf8.h"
#include "spec_config.h"

#include <jansson.h>
#include <ctype.h>
#include <locale.h>
#include <strings.h>
#include <wchar.h>


/* Parses text (and finishes): must fail with a message holding `needle`
 * and no command-line flag. */
static void parse_bad(const char *text, bool has_draft_model, const char *needle) {
    sp_spec_config c;
    sp_spec_config_init(&c, NULL);
    sp_error e = {0};
    sp_status st = sp_spec_config_parse(&c, text, &e);
    if (!st) st = sp_spec_config_finish(&c, has_draft_model, &e);
    if (st != SP_ERR_ARG) fail_msg("'%s': status %d, want SP_ERR_ARG (%s)", text, st, e.msg);
    if (!strstr(e.msg, needle)) fail_msg("'%s': message '%s' lacks '%s'", text, e.msg, needle);
    if (strstr(e.msg, "--") || strstr(e.msg, "-md")) fail_msg("'%s': message names a flag: %s", text, e.msg);
}

static void test_text_settings(void **state) {
    (void)state;
    sp_spec_params p = parse_ok("draft=ngram,gamma=7,ngram_min=2,ngram_max=5,p_min=0.25", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_NGRAM);
    assert_int_equal(p.gamma, 7);
    assert_int_equal(p.draft.ngram_min, 2);
    assert_int_equal(p.draft.ngram_max, 5);
    assert_true(p.draft_p_min == 0.25f);
    assert_int_equal(p.verifier, SP_VERIFIER_BLOCK);
    assert_false(p.draft.with_suffix);
    /* the suffix drafter, alone (chains and trees) and arbitrated */
    p = parse_ok("draft=ngram-cache,ngram_min=2,ngram_max=4", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_NGRAM_CACHE);
    /* llama.cpp's n-gram maps: their sizes, llama.cpp's defaults otherwise */
    p = parse_ok("draft=ngram-map-k4v,map_n=8,map_m=24,map_min_hits=2", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_NGRAM_MAP_K4V);
    assert_true(p.draft.map_n == 8 && p.draft.map_m == 24 && p.draft.map_min_hits == 2);
    p = parse_ok("draft=ngram-map-k", false);
    assert_true(p.draft.map_n == 12 && p.draft.map_m == 48 && p.draft.map_min_hits == 1);
    p = parse_ok("draft=ngram-mod", false);
    assert_true(p.draft.mod_n_match == 24 && p.draft.mod_n_min == 48 && p.draft.mod_n_max == 64);
    p = parse_ok("draft=ngram-mod,mod_n_match=16,mod_n_min=0,mod_n_max=8", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_NGRAM_MOD);
    assert_true(p.draft.mod_n_match == 16 && p.draft.mod_n_min == 0 && p.draft.mod_n_max == 8);
    p = parse_ok("draft=suffix,gamma=12", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_SUFFIX);
    assert_false(p.draft.with_suffix);
    p = parse_ok("draft=suffix,tree=3x2,verify=traversal", false);
    assert_int_equal(p.tree.n_nodes, 10);
    p = parse_ok("draft=model+suffix,gamma=4", true);
    assert_int_equal(p.draft.kind, SP_DRAFT_MODEL);
    assert_true(p.draft.with_suffix);
    p = parse_ok("draft=lowbit+suffix", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_LOWBIT);
    assert_true(p.draft.with_suffix && p.adaptive);
    /* aliases, spaces, a layer list continuing over the next items */
    p = parse_ok(" drafter = layerskip , skip_layers=1,3-4 , 6, verify=token,adaptive ", false);
    assert_int_equal(p.draft.kind, SP_DRAFT_LAYERSKIP);
    assert_string_equal(p.draft.skip_layers, "1,3-4,6");
    assert_int_equal(p.verifier, SP_VERIFIER_TOKEN);
    assert_true(p.adaptive);
    p = parse_ok("draft=layerskip,skip=2,adaptive=false,n_min=0,gamma=3", false);
    assert_string_equal(p.draft.skip_layers, "2");
    assert_false(p.adaptive);
    assert_int_equal(p.draft_n_min, 0);
    /* no draft length chosen: adaptive up to SP_SPEC_ADAPTIVE_GAMMA (0
     * included); any explicit length or tree keeps it static */
    p = parse_ok("draft=ngram", false);
    assert_true(p.adaptive);
    assert_int_equal(p.gamma, SP_SPEC_ADAPTIVE_GAMMA);
    p = parse_ok("draft=ngram,gamma=4", false);
    assert_false(p.adaptive);
    assert_int_equal(p.gamma, 4);
    p = parse_ok("draft=ngram,n_max=6", false);
    assert_false(p.adaptive);
    p = parse_ok("draft=ngram,adaptive=true", false);
    assert_true(p.adaptive);
    assert_int_equal(p.gamma, 4); /* the explicit switch keeps the library's default maximum */
    p = parse_ok("draft=model,tree=2x2", true);
    assert_false(p.adaptive);
    {
        /* layers: a length chosen in an earlier layer (the CLI's --gamma)
         * still counts when a later one (a request) only names the drafter */
        sp_spec_config c1, c2;
        sp_error e = {0};
        sp_spec_config_init(&c1, NULL);
        assert_int_equal(sp_spec_config_parse(&c1, "draft=ngram,gamma=3", &e), SP_OK);
        assert_int_equal(sp_spec_config_finish(&c1, false, &e), SP_OK);
        sp_spec_config_init(&c2, &c1.params);
        assert_int_equal(sp_spec_config_parse(&c2, "draft=layerskip", &e), SP_OK);
        assert_int_equal(sp_spec_config_finish(&c2, false, &e), SP_OK);
        assert_false(c2.params.adaptive);
        assert_int_equal(c2.params.gamma, 3);
    }
    /* lowbit: any supported type name, any case */
    p = parse_ok("draft=lowbit,lowbit=Q8_0", false);
    assert_int_equal(p.draft.lowbit_type, SP_GGML_Q8_0);
    p = parse_ok("draft=lowbit,lowbit=bf16,verify=lenient,lenience=0.5", false);
    assert_int_equal(p.draft.lowbit_type, SP_GGML_BF16);
    assert_int_equal(p.verifier, SP_VERIFIER_LENIENT);
    assert_true(p.lenience == 0.5);
    /* trees: the shape parsed once; mc-norep unless a verifier is given */
    p = parse_ok("draft=model,tree=4x2x1", true);
    assert_int_equal(p.tree.depth, 3);
    assert_int_equal(p.tree.n_nodes, 1 + 4 + 8 + 8);
    assert_int_equal(p.verifier, SP_VERIFIER_MC_NOREP);
    /* dynamic trees (EAGLE-2): K, depth, kept nodes; mc-norep by default */
    p = parse_ok("draft=eagle3,tree=dyn:4:6:32", true);
    assert_true(p.tree.dyn_k == 4 && p.tree.depth == 6 && p.tree.n_nodes == 33);
    assert_int_equal(p.verifier, SP_VERIFIER_MC_NOREP);
    assert_int_equal(sp_spec_config_budget(&p), 32);
    p = parse_ok("draft=mtp,tree=dyn:1:3:3,verify=mc", false);
    assert_true(p.tree.dyn_k == 1 && p.verifier == SP_VERIFIER_MC);
    char buf[32];
    assert_int_equal(sp_tree_shape_format(&p.tree, buf, sizeof buf), 9);
    assert_string_equal(buf, "dyn:1:3:3");
    p = parse_ok("tree=2x2,verify=greedy", true);
    assert_int_equal(p.draft.kind, SP_DRAFT_MODEL); /* a draft model is the default drafter */
    assert_int_equal(p.verifier, SP_VERIFIER_GREEDY);
    p = parse_ok("plain", true);
    assert_int_equal(p.draft.kind, SP_DRAFT_NONE);
    p = parse_ok("n_max=0", true); /* llama.cpp's off switch beats the draft model */
    assert_int_equal(p.draft.kind, SP_DRAFT_NONE);
    p = parse_ok("n_max=0,n_min=0,p_min=0.75", false); /* sent along by llama.cpp clients */
    assert_int_equal(p.draft.kind, SP_DRAFT_NONE);
    p = parse_ok("draft=ngram,n_max=12", false);
    assert_int_equal(p.gamma, 12);
}

static void test_text_errors(void **state) {
    (void)state;
    /* reliability probe, item 8: empty items and a trailing comma in a list */
    parse_bad(",,,", false, "empty setting");
    /* dynamic trees: bad K, depth or node count, drafters without a model,
     * verifiers that need a fixed shape: one line naming the setting */
    parse_bad("draft=layerskip,tree=dyn:0:4:8", false, "tree: tree shape 'dyn:0:4:8': K 0 outside [1, 16]");
    parse_bad("draft=layerskip,tree=dyn:17:4:8", false, "K 17 outside");
    parse_bad("draft=layerskip,tree=dyn:4:0:8", false, "depth 0 outside");
    parse_bad("draft=layerskip,tree=dyn:4:65:8", false, "depth 65 outside");
    parse_bad("draft=layerskip,tree=dyn:4:4:0", false, "N 0 nodes outside");
    parse_bad("draft=layerskip,tree=dyn:4:4:1024", false, "N 1024 nodes outside [1, 1023]");
    parse_bad("draft=layerskip,tree=dyn:4:4", false, "expected a dynamic tree like dyn:4:6:32");
    parse_bad("draft=layerskip,tree=dyn:4:4:8:", false, "expected a dynamic tree");
    parse_bad("draft=layerskip,tree=dyn:4x4:8", false, "expected a dynamic tree");
    parse_bad("draft=layerskip,tree=dyn:99999999999:4:8", false, "K");
    parse_bad("draft=suffix,tree=dyn:4:4:8", false, "dynamic trees need a model-based drafter");
    parse_bad("draft=layerskip,tree=dyn:4:4:8,verify=traversal", false, "verifier: traversal assumes a tree shape");
    parse_bad("draft=layerskip,tree=dyn:4:4:8,verify=gbv", false, "verifier: gbv");
    parse_bad("draft=layerskip,tree=dyn:4:4:8,verify=block", false, "tree");
    parse_bad("draft=ngram,,gamma=4", false, "empty setting");
    parse_bad("draft=ngram,", false, "empty setting");
    parse_bad("draft=layerskip,skip=1,", false, "empty setting");
    parse_bad("", false, "empty configuration");
    parse_bad("   ", false, "empty configuration");
    parse_bad("draft=bogus", false, "draft: unknown drafter 'bogus'");
    parse_bad("draft=suffix+suffix", false, "arbitrates nothing");
    parse_bad("draft=ngram-map-k+suffix", false, "arbitrates nothing");
    parse_bad("draft=ngram,map_n=3", false, "map_n: only the ngram-map-k and ngram-map-k4v");
    parse_bad("draft=ngram-map-k,map_min_hits=2", false, "map_min_hits: only the ngram-map-k4v");
    parse_bad("draft=ngram-map-k4v,map_m=0", false, "map_m: must be an integer in [1, 1024]");
    parse_bad("draft=ngram-map-k4v,map_n=1025", false, "map_n: must be an integer in [1, 1024]");
    parse_bad("draft=ngram-map-k,mod_n_min=2", false, "mod_n_min: only the ngram-mod drafter");
    parse_bad("draft=ngram-mod,mod_n_min=9,mod_n_max=8", false, "mod_n_min: need");
    parse_bad("draft=ngram-mod,mod_n_match=0", false, "mod_n_match: must be an integer in [1, 1024]");
    parse_bad("draft=bogus+suffix", false, "unknown drafter 'bogus+suffix'");
    parse_bad("draft=model+suffix,tree=2x2", true, "arbitration with suffix drafts chains");
    parse_bad("draft=suffix,ngram_min=2", false, "only the ngram and ngram-cache drafters use it");
    parse_bad("draft=ngram-cache,ngram_max=5", false, "ngram-cache needs");
    parse_bad("draft=ngram-cache+suffix", false, "arbitrates nothing");
    parse_bad("draft=ngram,verify=fast", false, "verify: unknown verifier");
    parse_bad("draft=ngram,gama=4", false, "unknown setting 'gama'");
    parse_bad("draft=ngram,gamma=0", false, "gamma: must be an integer in [1, 32]");
    parse_bad("draft=ngram,gamma=33", false, "gamma");
    parse_bad("draft=ngram,gamma=4x", false, "gamma: expected an integer");
    parse_bad("draft=ngram,gamma=", false, "gamma: empty value");
    parse_bad("draft=ngram,gamma", false, "gamma: needs a value");
    parse_bad("draft=ngram,gamma=4,gamma=2", false, "gamma: given twice");
    parse_bad("draft=ngram,gamma=4,n_max=2", false, "n_max: given twice");
    parse_bad("draft=ngram,n_max=-1", false, "n_max: must be an integer in [0, 32]");
    parse_bad("draft=ngram,p_min=2", false, "p_min: must be a number in [0, 1]");
    parse_bad("draft=ngram,p_min=nan", false, "p_min: expected a number");
    parse_bad("draft=ngram,n_min=5,gamma=4", false, "n_min");
    parse_bad("draft=ngram,adaptive=yes", false, "adaptive: must be 0, 1, true or false");
    parse_bad("draft=ngram,ngram_min=0", false, "ngram_min");
    parse_bad("draft=ngram,ngram_min=5,ngram_max=2", false, "ngram_min");
    parse_bad("draft=layerskip,tree=2x", false, "tree: tree shape '2x'");
    parse_bad("draft=layerskip,tree=0x2", false, "tree");
    parse_bad("draft=layerskip,skip=1,,3", false, "empty setting");
    parse_bad("draft=layerskip,skip=a", false, "skip: 'a' is not a layer list");
    parse_bad("draft=layerskip,skip=3-1", false, "skip");
    parse_bad("draft=lowbit,lowbit=q3", false, "lowbit: 'q3' is not a weight type");
    parse_bad("draft=lowbit,lowbit=q3_K", false, "lowbit"); /* loaded, not written */
    parse_bad("draft=ngram,lenience=0.5", false, "lenience: only the lenient verifier uses it");
    parse_bad("draft=ngram,verify=lenient,lenience=0", false, "lenience: must be a number in (0, 1]");
    /* combinations */
    parse_bad("draft=ngram,skip=1", false, "skip_layers: only the layerskip drafter uses it");
    parse_bad("draft=ngram,lowbit=q8_0", false, "lowbit: only the lowbit drafter uses it");
    parse_bad("draft=layerskip,ngram_max=3", false, "ngram_max: only the ngram and ngram-cache drafters");
    parse_bad("draft=ngram,tree=2x2", false, "tree: trees need a model-based drafter");
    parse_bad("draft=layerskip,tree=2x2,verify=token", false, "tree: trees are verified with");
    parse_bad("draft=layerskip,tree=2x2,gamma=4", false, "gamma: a tree's shape sets the draft length");
    parse_bad("draft=ngram,verify=mc-norep", false, "verifier: mc-norep verifies a draft tree");
    parse_bad("draft=model", false, "drafter: 'model' needs a draft model");
    parse_bad("verify=token", false, "no drafter to use it with");
    parse_bad("gamma=4", false, "gamma: no drafter");
    parse_bad("draft=none,gamma=4", true, "gamma: plain decoding drafts nothing");
    parse_bad("draft=none,p_min=0.5", false, "p_min: plain decoding drafts nothing");
    parse_bad("plain,gamma=4", false, "unknown setting 'plain'");
    parse_bad("drafter=ngram,n_max=0", false, "n_max: 0 turns speculation off");
    parse_bad("n_max=0,drafter=ngram", false, "drafter: n_max 0 turned speculation off");
}

/* The layer over a base (a server's defaults): a request's draft length
 * makes a chain of a base tree; unchanged settings stay. */
static void test_layers(void **state) {
    (void)state;
    sp_spec_params base = parse_ok("draft=model,tree=3x2", true);
    sp_spec_config c;
    sp_error e = {0};
    sp_spec_config_init(&c, &base);
    assert_int_equal(sp_spec_config_parse(&c, "n_max=6,p_min=0.5", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, true, &e), SP_OK);
    assert_int_equal(c.params.tree.depth, 0);
    assert_int_equal(c.params.gamma, 6);
    assert_int_equal(c.params.verifier, SP_VERIFIER_BLOCK);
    assert_int_equal(c.params.draft.kind, SP_DRAFT_MODEL);
    sp_spec_config_init(&c, &base);
    assert_int_equal(sp_spec_config_parse(&c, "verify=mc", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, true, &e), SP_OK);
    assert_int_equal(c.params.tree.n_nodes, 10);
    assert_int_equal(c.params.verifier, SP_VERIFIER_MC);
    sp_spec_config_init(&c, &base);
    assert_int_equal(sp_spec_config_parse(&c, "verify=traversal", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, true, &e), SP_OK);
    assert_int_equal(c.params.verifier, SP_VERIFIER_TRAVERSAL);
    sp_spec_config_init(&c, &base);
    assert_int_equal(sp_spec_config_parse(&c, "verifier=gbv,tree=3x1x1", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, true, &e), SP_OK);
    assert_int_equal(c.params.verifier, SP_VERIFIER_GBV);
    assert_int_equal(c.params.tree.n_nodes, 10);
    sp_spec_config_init(&c, NULL);
    assert_int_equal(sp_spec_config_parse(&c, "draft=model,verifier=gbv,gamma=4", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, true, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "gbv verifies a draft tree"));
    sp_spec_config_init(&c, &base);
    assert_int_equal(sp_spec_config_parse(&c, "verify=block", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, true, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "tree"));
    /* one setting at a time, as the CLI flags give them */
    sp_spec_config_init(&c, NULL);
    assert_int_equal(sp_spec_config_set(&c, "drafter", "lowbit", &e), SP_OK);
    assert_int_equal(sp_spec_config_set(&c, "adaptive", NULL, &e), SP_OK);
    assert_int_equal(sp_spec_config_set(&c, "gamma", NULL, &e), SP_ERR_ARG);
    assert_int_equal(sp_spec_config_finish(&c, false, &e), SP_OK);
    assert_true(c.params.adaptive);
    /* over an adaptive layer (a server's --adaptive), a request's gamma or
     * n_max is a static length; with adaptive in the same layer, its maximum */
    sp_spec_params adaptive = c.params;
    const char *const statics[] = {"gamma=3", "n_max=3", "gamma=3,adaptive=false"};
    for (size_t i = 0; i < sizeof statics / sizeof statics[0]; i++) {
        sp_spec_config_init(&c, &adaptive);
        assert_int_equal(sp_spec_config_parse(&c, statics[i], &e), SP_OK);
        assert_int_equal(sp_spec_config_finish(&c, false, &e), SP_OK);
        assert_false(c.params.adaptive);
        assert_int_equal(c.params.gamma, 3);
    }
    const char *const adaptives[] = {"gamma=3,adaptive", "adaptive=true,n_max=3"};
    for (size_t i = 0; i < sizeof adaptives / sizeof adaptives[0]; i++) {
        sp_spec_config_init(&c, &adaptive);
        assert_int_equal(sp_spec_config_parse(&c, adaptives[i], &e), SP_OK);
        assert_int_equal(sp_spec_config_finish(&c, false, &e), SP_OK);
        assert_true(c.params.adaptive);
        assert_int_equal(c.params.gamma, 3);
    }
    sp_spec_config_init(&c, &adaptive);
    assert_int_equal(sp_spec_config_parse(&c, "p_min=0.5", &e), SP_OK);
    assert_int_equal(sp_spec_config_finish(&c, false, &e), SP_OK);
    assert_true(c.params.adaptive); /* no length given: the layer below's */
}

static sp_status json_apply(const char *text, sp_spec_config *c, sp_error *e) {
    sp_spec_config_init(c, NULL);
    sp_status st = sp_spec_config_json_text(c, text, strlen(text), e);
    if (!st) st = sp_spec_config_finish(c, false, e);
    return st;
}

static void json_bad(const char *text, const char *needle) {
    sp_spec_config c;
    sp_error e = {0};
    if (json_apply(text, &c, &e) != SP_ERR_ARG) fail_msg("%s: accepted", text);
    if (!strstr(e.msg, needle)) fail_msg("%s: message '%s' lacks '%s'", text, e.msg, needle);
}

static void test_json(void **state) {
    (void)state;
    sp_spec_config c;
    sp_error e = {0};
    /* llama.cpp's per-request keys */
    assert_int_equal(json_apply("{\"drafter\": \"ngram\", \"n_max\": 6, \"n_min\": 0, \"p_min\": 0.75}", &c, &e),
                     SP_OK);
    assert_int_equal(c.params.gamma, 6);
    assert_int_equal(c.params.draft_n_min, 0);
    assert_true(c.params.draft_p_min == 0.75f);
    assert_int_equal(json_apply("{\"n_max\": 0, \"n_min\": 0, \"p_min\": 0.75}", &c, &e), SP_OK);
    assert_int_equal(c.params.draft.kind, SP_DRAFT_NONE);
    /* Specula's own keys; null means "not given"; a number for p_min may be an integer */
    assert_int_equal(json_apply("{\"drafter\": \"layerskip\", \"verifier\": \"mc\", \"tree\": \"2x2\", "
                                "\"adaptive\": false, \"skip_layers\": \"1-2\", \"p_min\": 1, "
                                "\"gamma\": null}",
                                &c, &e),
                     SP_OK);
    assert_int_equal(c.params.tree.n_nodes, 7);
    assert_int_equal(c.params.verifier, SP_VERIFIER_MC);
    assert_string_equal(c.params.draft.skip_layers, "1-2");
    assert_true(c.params.draft_p_min == 1.0f);
    assert_int_equal(json_apply("{}", &c, &e), SP_OK);
    assert_int_equal(c.params.draft.kind, SP_DRAFT_NONE);
    /* wrong JSON types, named */
    json_bad("{\"drafter\": \"ngram\", \"n_max\": \"4\"}", "n_max: expected an integer, got a string");
    json_bad("{\"drafter\": \"ngram\", \"gamma\": 4.5}", "gamma: expected an integer, got a number");
    json_bad("{\"drafter\": \"ngram\", \"adaptive\": 1}", "adaptive: expected true or false, got an integer");
    json_bad("{\"drafter\": 3}", "drafter: expected a string, got an integer");
    json_bad("{\"drafter\": \"layerskip\", \"tree\": [2, 2]}", "tree: expected a string, got an array");
    json_bad("{\"drafter\": \"ngram\", \"p_min\": \"0.5\"}", "p_min: expected a number, got a string");
    json_bad("{\"drafter\": \"ngram\", \"p_min\": true}", "p_min: expected a number, got a boolean");
    json_bad("{\"drafter\": \"\"}", "drafter: empty value");
    json_bad("{\"drafter\": \"ng\\u0000ram\"}", "NUL");
    /* bad values, keys, documents */
    json_bad("{\"drafter\": \"ngram\", \"n_max\": 99}", "n_max: must be an integer in [0, 32]");
    json_bad("{\"drafter\": \"ngram\", \"n_max\": 99999999999999999}", "n_max");
    json_bad("{\"drafter\": \"ngram\", \"speed\": 2}", "unknown setting 'speed'");
    json_bad("{\"drafter\": \"ngram\", \"gamma\": 2, \"n_max\": 3}", "given twice");
    json_bad("{\"drafter\": \"ngram\", \"drafter\": \"ngram\"}", "not valid JSON");
    json_bad("[1, 2]", "expected a JSON object, got an array");
    json_bad("{\"drafter\": ", "not valid JSON");
    json_bad("{\"gamma\": 4}", "gamma: no drafter");
    json_bad("5", "expected a JSON object, got an integer");
    json_bad("null", "expected a JSON object, got null");
}

/* lowbit accepts exactly the types the engine computes with, by their
 * ggml names in any case (the kernels grow that set; this keeps up). */
static void test_lowbit_contract(void **state) {
    (void)state;
    int accepted = 0;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++) {
        const char *name = sp_ggml_type_name((sp_ggml_type)t);
        if (!strcmp(name, "unknown")) continue;
        char upper[32];
        size_t i = 0;
        for (; name[i] && i + 1 < sizeof upper; i++) upper[i] = (char)toupper((unsigned char)name[i]);
        upper[i] = 0;
        sp_ggml_type got = SP_GGML_TYPE_COUNT;
        sp_error e = {0};
        sp_status a = sp_spec_lowbit_parse(name, &got, &e), b = sp_spec_lowbit_parse(upper, &got, &e);
        if (sp_quant_supported((sp_ggml_type)t)) {
            assert_int_equal(a, SP_OK);
            assert_int_equal(b, SP_OK);
            assert_int_equal(got, t);
            accepted++;
        } else {
            assert_int_equal(a, SP_ERR_ARG);
            assert_int_equal(b, SP_ERR_ARG);
        }
    }
    assert_true(accepted >= 5); /* f32 f16 bf16 q8_0 q4_0 at least */
}

static void test_batch_and_context(void **state) {
    (void)state;
    sp_spec_params plain = sp_spec_default_params();
    assert_int_equal(sp_spec_config_batch(&plain), SP_CTX_DEFAULT_BATCH);
    assert_int_equal(sp_spec_config_extra_ctx(&plain), 0);
    assert_int_equal(sp_spec_config_budget(&plain), 0);
    sp_spec_params p = parse_ok("draft=ngram,gamma=32", false);
    assert_int_equal(sp_spec_config_budget(&p), 32);
    assert_int_equal(sp_spec_config_batch(&p), SP_CTX_DEFAULT_BATCH); /* 34 rows fit the default */
    assert_int_equal(sp_spec_config_extra_ctx(&p), 0);
    p = parse_ok("draft=layerskip,tree=8x8", false); /* 1 + 8 + 64 nodes */
    assert_int_equal(sp_spec_config_budget(&p), 72);
    assert_int_equal(sp_spec_config_batch(&p), 74 > SP_CTX_DEFAULT_BATCH ? 74 : SP_CTX_DEFAULT_BATCH);
    assert_int_equal(sp_spec_config_extra_ctx(&p), 73);
    p = parse_ok("draft=layerskip,tree=8x8x8", false); /* 1 + 8 + 64 + 512 nodes */
    assert_int_equal(sp_spec_config_budget(&p), 584);
    assert_int_equal(sp_spec_config_batch(&p), 586 > SP_CTX_DEFAULT_BATCH ? 586 : SP_CTX_DEFAULT_BATCH);
    assert_true(sp_spec_config_batch(&p) >= 586);
    /* a dynamic tree keeps N nodes but its drafter caches K per level */
    p = parse_ok("draft=layerskip,tree=dyn:8:6:16", false);
    assert_int_equal(sp_spec_config_budget(&p), 16);
    assert_int_equal(sp_spec_config_batch(&p), SP_CTX_DEFAULT_BATCH);
    assert_int_equal(sp_spec_config_extra_ctx(&p), 1 + 8 * 5);
    p = parse_ok("draft=layerskip,tree=dyn:2:3:40", false);
    assert_int_equal(sp_spec_config_extra_ctx(&p), 41);
    sp_sampler_params s = sp_sampler_default_params();
    sp_error e = {0};
    p = parse_ok("draft=ngram,verify=greedy", false);
    assert_int_equal(sp_spec_config_check_sampling(&p, &s, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "verifier: greedy needs temperature 0"));
    s.temperature = 0;
    assert_int_equal(sp_spec_config_check_sampling(&p, &s, &e), SP_OK);
}

/* What needs the model and context: vocabulary, layer list, batch, room. */
static void test_check_against_model(void **state) {
    (void)state;
    const char *tp = tiny_model(2, 32, 51, 1.0f), *op = tiny_model(3, 48, 52, 1.0f);
    sp_model *m = load(tp), *other = load(op);
    sp_ctx *ctx = NULL;
    sp_ctx_params cp = sp_ctx_default_params();
    cp.n_ctx = 64;
    cp.max_batch = 64;
    sp_error e = {0};
    assert_int_equal(sp_ctx_init(m, &cp, &ctx, &e), SP_OK);
    sp_spec_params p = parse_ok("draft=layerskip,skip=1", false);
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_OK);
    p = parse_ok("draft=layerskip,skip=1,3", false); /* layer 3 of 3 */
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "skip_layers"));
    p = parse_ok("draft=layerskip,skip=0-2", false);
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "every layer"));
    p = parse_ok("draft=model", true);
    p.draft.draft_model = other;
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "drafter: the draft model's vocabulary"));
    p.draft.draft_model = m;
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_OK);
    p = parse_ok("draft=lowbit,tree=8x8", false); /* needs a batch of 74 */
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_ERR_RANGE);
    assert_non_null(strstr(e.msg, "tree: a draft budget of 72 tokens needs a target batch of 74"));
    p = parse_ok("draft=lowbit,tree=2x2x2x2x2", false); /* 63 nodes: fit the batch, not the context */
    assert_int_equal(sp_spec_config_check(&p, ctx, &e), SP_ERR_RANGE);
    assert_non_null(strstr(e.msg, "context"));
    sp_ctx_free(ctx);
    /* reliability probe, item 6: plain decoding needs no draft budget, even
     * in a context of 12 tokens */
    cp.n_ctx = 12;
    assert_int_equal(sp_ctx_init(m, &cp, &ctx, &e), SP_OK);
    sp_spec_params plain = sp_spec_default_params();
    assert_int_equal(sp_spec_config_check(&plain, ctx, &e), SP_OK);
    sp_spec *s = NULL;
    assert_int_equal(sp_spec_init(ctx, &plain, &s, &e), SP_OK);
    const int32_t prompt[5] = {1, 4, 8, 15, 16};
    int32_t out[2];
    sp_gen_params gp = sp_gen_default_params();
    gp.n_predict = 2;
    gp.stop_at_eog = false;
    sp_gen_stats gs;
    assert_int_equal(sp_spec_generate(s, prompt, 5, &gp, out, 2, &gs, NULL, NULL, NULL, &e), SP_OK);
    assert_int_equal(gs.n_generated, 2);
    sp_spec_free(s);
    sp_ctx_free(ctx);
    sp_model_free(m);
    sp_model_free(other);
    unlink(tp);
    unlink(op);
}

/* Hand-made byte strings: valid 1-4 byte characters kept, each byte of an
 * invalid sequence replaced by U+FFFD; and agreement with the C library's
 * own UTF-8 decoder (mbrtowc in C.UTF-8) on every 1-3 byte string over the
 * bytes that matter. */
static void test_utf8(void **state) {
    (void)state;
    static const struct {
        const char *in;
        size_t n, bad;
        const char *out;
    } cases[] = {
        {"plain", 5, 0, "plain"},
        {"\xC3\xA9t\xC3\xA9", 6, 0, "\xC3\xA9t\xC3\xA9"},             /* été */
        {"\xF0\x9F\x98\x80", 4, 0, "\xF0\x9F\x98\x80"},                 /* U+1F600 */
        {"a\xC3", 2, 1, "a\xEF\xBF\xBD"},                               /* truncated */
        {"\xE4 x", 3, 1, "\xEF\xBF\xBD x"},                             /* lead byte before a space */
        {"\xC0\xAF", 2, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},                 /* overlong '/' */
        {"\xED\xA0\x80", 3, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF4\x90\x80\x80", 4, 4,
         "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},             /* above U+10FFFF */
        {"\xFF", 1, 1, "\xEF\xBF\xBD"},
        {"x\0y", 3, 0, "x\0y"},                                         /* NUL is a character */
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(sp_utf8_invalid_bytes(cases[i].in, cases[i].n), cases[i].bad);
        size_t n = sp_utf8_repair(cases[i].in, cases[i].n, buf);
        assert_int_equal(n, cases[i].n + 2 * cases[i].bad);
        assert_memory_equal(buf, cases[i].out, n);
    }
    if (!setlocale(LC_CTYPE, "C.UTF-8")) {
        fprintf(stderr, "C.UTF-8 locale missing: skipping the mbrtowc comparison\n");
        return;
    }
    static const unsigned char bytes[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0,
                                          0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0,
                                          0xF1, 0xF4, 0xF5, 0xFF};
    const size_t nb = sizeof bytes;
    for (size_t a = 0; a < nb; a++)
        for (size_t b = 0; b <= nb; b++)
            for (size_t c = 0; c <= nb; c++) {
                char s[3] = {(char)bytes[a], b < nb ? (char)bytes[b] : 0, c < nb ? (char)bytes[c] : 0};
                size_t n = b == nb ? 1 : c == nb ? 2 : 3;
                mbstate_t st;
                memset(&st, 0, sizeof st);
                wchar_t wc;
                size_t want = mbrtowc(&wc, s, n, &st);
                if (want == 0) want = 1; /* NUL */
                if (want == (size_t)-1 || want == (size_t)-2) want = 0;
                if (sp_utf8_seq_len(s, n) != want)
                    fail_msg("bytes %02x %02x %02x (n %zu): %zu, mbrtowc %zu", bytes[a],
                             (unsigned char)s[1], (unsigned char)s[2], n, sp_utf8_seq_len(s, n), want);
            }
    setlocale(LC_CTYPE, "C");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_text_settings),     cmocka_unit_test(test_text_errors),
    cmocka_unit_test(test_layers),            cmocka_unit_test(test_json),
    cmocka_unit_test(test_lowbit_contract),   cmocka_unit_test(test_batch_and_context),
    cmocka_unit_test(test_check_against_model), cmocka_unit_test(test_utf8),
};
SP_TEST_MAIN(tests)
