/* spec_config: speculation settings by name, from key=value text and JSON,
 * the rules that finish a configuration, and its checks against a target;
 * see sp_spec.h. */
#include "sp_spec.h"
#include "draft.h"
#include "requant.h"
#include "spec_config.h"
#include "tree.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


/* ------------------------------------------------------------ settings */

typedef enum setting_id {
    S_DRAFTER, S_VERIFIER, S_GAMMA, S_N_MIN, S_P_MIN, S_TREE, S_ADAPTIVE, S_NGRAM_MIN,
    S_NGRAM_MAX, S_SKIP, S_LOWBIT, S_LENIENCE, S_MAP_N, S_MAP_M, S_MAP_HITS,
    S_MOD_MATCH, S_MOD_MIN, S_MOD_MAX, S_COUNT
} setting_id;

typedef enum value_kind { V_NAME, V_INT, V_NUMBER, V_BOOL } value_kind;

/* One spelling of a setting. n_max is gamma's llama.cpp spelling (with 0
 * meaning "off"), so it shares gamma's id. */
typedef struct spelling {
    const char *name;
    setting_id id;
    value_kind kind;
} spelling;

static const spelling SPELLINGS[] = {
    {"drafter", S_DRAFTER, V_NAME},     {"draft", S_DRAFTER, V_NAME},
    {"verifier", S_VERIFIER, V_NAME},   {"verify", S_VERIFIER, V_NAME},
    {"gamma", S_GAMMA, V_INT},          {"n_max", S_GAMMA, V_INT},
    {"n_min", S_N_MIN, V_INT},          {"p_min", S_P_MIN, V_NUMBER},
    {"tree", S_TREE, V_NAME},           {"adaptive", S_ADAPTIVE, V_BOOL},
    {"ngram_min", S_NGRAM_MIN, V_INT},  {"ngram_max", S_NGRAM_MAX, V_INT},
    {"skip_layers", S_SKIP, V_NAME},    {"skip", S_SKIP, V_NAME},
    {"lowbit", S_LOWBIT, V_NAME},       {"lenience", S_LENIENCE, V_NUMBER},
    {"map_n", S_MAP_N, V_INT},          {"map_m", S_MAP_M, V_INT},
    {"map_min_hits", S_MAP_HITS, V_INT},    {"mod_n_match", S_MOD_MATCH, V_INT},
    {"mod_n_min", S_MOD_MIN, V_INT},        {"mod_n_max", S_MOD_MAX, V_INT},
};
#define N_SPELLINGS (sizeof SPELLINGS / sizeof SPELLINGS[0])

static const char *const KEY_LIST =
    "drafter, verifier, gamma, n_max, n_min, p_min, tree, adaptive, ngram_min, ngram_max, "
    "skip_layers, lowbit, lenience, map_n, map_m, map_min_hits, mod_n_match, mod_n_min, mod_n_max";

static const spelling *find_spelling(const char *key) {
    for (size_t i = 0; key && i < N_SPELLINGS; i++)
        if (!strcmp(key, SPELLINGS[i].name)) return &SPELLINGS[i];
    return NULL;
}

static bool is_given(const sp_spec_config *c, setting_id id) { return c->given >> id & 1u; }

/* A typed value, from text or from JSON. */
typedef struct value {
    const char *str; /* V_NAME */
    long long i;     /* V_INT */
    double d;        /* V_NUMBER */
    bool b;          /* V_BOOL */
} value;

void sp_spec_config_init(sp_spec_config *c, const sp_spec_params *base) {
    c->params = base ? *base : sp_spec_default_params();
    c->given = 0;
    c->off_by_n_max = false;
}

sp_status sp_spec_lowbit_parse(const char *name, sp_ggml_type *out, sp_error *err) {
    char names[256] = "";
    size_t len = 0;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++) {
        if (!sp_model_requantize_supported((sp_ggml_type)t)) continue;
        const char *tn = sp_ggml_type_name((sp_ggml_type)t);
        if (name && !strcasecmp(name, tn)) {
            *out = (sp_ggml_type)t;
            return SP_OK;
        }
        int n = snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", tn);
        if (n > 0 && (size_t)n < sizeof names - len) len += (size_t)n;
    }
    return sp_fail(err, SP_ERR_ARG, "lowbit: '%s' is not a weight type Specula computes with (%s)",
                   name ? name : "", names);
}

/* Store one typed value; `key` is the spelling the user wrote (messages). */
static sp_status apply(sp_spec_config *c, const spelling *sp, const char *key, const value *v,
                       sp_error *err) {
    sp_spec_params *p = &c->params;
    const bool n_max = !strcmp(sp->name, "n_max");
    if (sp->id == S_DRAFTER && c->off_by_n_max)
        return sp_fail(err, SP_ERR_ARG, "%s: n_max 0 turned speculation off; give one of them", key);
    if (is_given(c, sp->id) || (n_max && c->off_by_n_max))
        return sp_fail(err, SP_ERR_ARG, "%s: given twice%s", key,
                       sp->id == S_GAMMA ? " (gamma and n_max are the same setting)" : "");
    switch (sp->id) {
    case S_DRAFTER: {
        /* "X+suffix": X arbitrated per step with the suffix drafter */
        char base[32];
        size_t L = strlen(v->str);
        const bool plus = L > 7 && !strcmp(v->str + L - 7, "+suffix") && L - 7 < sizeof base;
        if (plus) {
            memcpy(base, v->str, L - 7);
            base[L - 7] = 0;
        }
        if (sp_drafter_parse(plus ? base : v->str, &p->draft.kind, err))
            return sp_fail(err, SP_ERR_ARG, "%s: unknown drafter '%s' (none, model, ngram, "
                           "layerskip, lowbit, eagle3, mtp, suffix, ngram-cache, ngram-map-k, ngram-map-k4v, ngram-mod; "
                           "model+suffix etc. "
                           "to arbitrate)", key,
                           v->str);
        if (plus && (p->draft.kind == SP_DRAFT_NONE || p->draft.kind == SP_DRAFT_SUFFIX ||
                     (p->draft.kind >= SP_DRAFT_NGRAM_CACHE && p->draft.kind != SP_DRAFT_MTP)))
            return sp_fail(err, SP_ERR_ARG, "%s: '%s' arbitrates nothing (model, ngram, layerskip "
                           "or lowbit +suffix)", key, v->str);
        p->draft.with_suffix = plus;
        break;
    }
    case S_VERIFIER:
        if (sp_verifier_parse(v->str, &p->verifier, err))
            return sp_fail(err, SP_ERR_ARG, "%s: unknown verifier '%s' (token, block, greedy, "
                           "lenient, mc, mc-norep, naive, gbv, traversal)", key, v->str);
        break;
    case S_GAMMA:
        if (n_max && v->i == 0) { /* llama.cpp: no speculation for this request */
            if (is_given(c, S_DRAFTER))
                return sp_fail(err, SP_ERR_ARG, "%s: 0 turns speculation off, but a drafter is "
                               "given too", key);
            p->draft.kind = SP_DRAFT_NONE;
            c->off_by_n_max = true;
            c->given |= 1u << S_DRAFTER;
            return SP_OK; /* a draft length was not given */
        }
        if (v->i < 1 || v->i > SP_SPEC_MAX_GAMMA)
            return sp_fail(err, SP_ERR_ARG, "%s: must be an integer in [%d, %d], got %lld", key,
                           n_max ? 0 : 1, SP_SPEC_MAX_GAMMA, v->i);
        p->gamma = (int32_t)v->i;
        p->length_set = true;
        /* a length given in this layer is that static length, whatever an
         * earlier layer (a server's --adaptive) said, unless this layer asks
         * for adaptive too (then gamma is its maximum) */
        if (!is_given(c, S_ADAPTIVE)) p->adaptive = false;
        break;
    case S_N_MIN:
        if (v->i < 0 || v->i > SP_SPEC_MAX_GAMMA)
            return sp_fail(err, SP_ERR_ARG, "%s: must be an integer in [0, %d], got %lld", key,
                           SP_SPEC_MAX_GAMMA, v->i);
        p->draft_n_min = (int32_t)v->i;
        break;
    case S_P_MIN:
        if (!(v->d >= 0 && v->d <= 1))
            return sp_fail(err, SP_ERR_ARG, "%s: must be a number in [0, 1], got %g", key, v->d);
        p->draft_p_min = (float)v->d;
        break;
    case S_TREE: {
        sp_error e = {0};
        if (sp_tree_shape_parse(v->str, &p->tree, &e))
            return sp_fail(err, SP_ERR_ARG, "%s: %s", key, e.msg);
        break;
    }
    case S_ADAPTIVE:
        p->adaptive = v->b;
        p->length_set = true;
        break;
    case S_NGRAM_MIN:
    case S_NGRAM_MAX:
        if (v->i < 1 || v->i > SP_NGRAM_MAX)
            return sp_fail(err, SP_ERR_ARG, "%s: must be an integer in [1, %d], got %lld", key,
                           SP_NGRAM_MAX, v->i);
        *(sp->id == S_NGRAM_MIN ? &p->draft.ngram_min : &p->draft.ngram_max) = (int32_t)v->i;
        break;
    case S_MAP_N:
    case S_MAP_M:
    case S_MAP_HITS:
        if (v->i < 1 || v->i > 1024)
            return sp_fail(err, SP_ERR_ARG, "%s: must be an integer in [1, 1024], got %lld", key, v->i);
        *(sp->id == S_MAP_N   ? &p->draft.map_n
          : sp->id == S_MAP_M ? &p->draft.map_m
                              : &p->draft.map_min_hits) = (int32_t)v->i;
        break;
    case S_MOD_MATCH:
    case S_MOD_MIN:
    case S_MOD_MAX:
        if (v->i < (sp->id == S_MOD_MIN ? 0 : 1) || v->i > 1024)
            return sp_fail(err, SP_ERR_ARG, "%s: must be an integer in [%d, 1024], got %lld", key,
                           sp->id == S_MOD_MIN ? 0 : 1, v->i);
        *(sp->id == S_MOD_MATCH ? &p->draft.mod_n_match
          : sp->id == S_MOD_MIN ? &p->draft.mod_n_min
                                : &p->draft.mod_n_max) = (int32_t)v->i;
        break;
    case S_SKIP: {
        if (strlen(v->str) >= sizeof p->draft.skip_layers)
            return sp_fail(err, SP_ERR_ARG, "%s: layer list longer than %zu characters", key,
                           sizeof p->draft.skip_layers - 1);
        sp_error e = {0};
        if (!*v->str || sp_parse_skip_layers(v->str, 0, NULL, &e))
            return sp_fail(err, SP_ERR_ARG, "%s: '%s' is not a layer list like '1,3,5-7'", key,
                           v->str);
        memcpy(p->draft.skip_layers, v->str, strlen(v->str) + 1);
        break;
    }
    case S_LOWBIT: {
        sp_error e = {0};
        if (sp_spec_lowbit_parse(v->str, &p->draft.lowbit_type, &e)) /* "lowbit: ..." */
            return sp_fail(err, SP_ERR_ARG, "%s%s", key, strchr(e.msg, ':'));
        break;
    }
    case S_LENIENCE:
        if (!(v->d > 0 && v->d <= 1))
            return sp_fail(err, SP_ERR_ARG, "%s: must be a number in (0, 1], got %g", key, v->d);
        p->lenience = v->d;
        break;
    default: return sp_fail(err, SP_ERR_ARG, "%s: unknown setting", key);
    }
    c->given |= 1u << sp->id;
    return SP_OK;
}

/* ---------------------------------------------------------------- text */

static bool text_int(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || isspace((unsigned char)*s)) return false;
    *out = v;
    return true;
}

static bool text_number(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || isspace((unsigned char)*s)) return false;
    *out = v;
    return true;
}

sp_status sp_spec_config_set(sp_spec_config *c, const char *key, const char *text, sp_error *err) {
    const spelling *sp = find_spelling(key);
    if (!sp) return sp_fail(err, SP_ERR_ARG, "unknown setting '%s' (%s)", key ? key : "", KEY_LIST);
    if (!text && sp->kind != V_BOOL)
        return sp_fail(err, SP_ERR_ARG, "%s: needs a value (%s=...)", key, key);
    if (text && !*text) return sp_fail(err, SP_ERR_ARG, "%s: empty value", key);
    value v = {.str = text};
    switch (sp->kind) {
    case V_NAME: break;
    case V_INT:
        if (!text_int(text, &v.i))
            return sp_fail(err, SP_ERR_ARG, "%s: expected an integer, got '%s'", key, text);
        break;
    case V_NUMBER:
        if (!text_number(text, &v.d))
            return sp_fail(err, SP_ERR_ARG, "%s: expected a number, got '%s'", key, text);
        break;
    case V_BOOL:
        if (!text || !strcmp(text, "1") || !strcasecmp(text, "true")) v.b = true;
        else if (!strcmp(text, "0") || !strcasecmp(text, "false")) v.b = false;
        else return sp_fail(err, SP_ERR_ARG, "%s: must be 0, 1, true or false, got '%s'", key, text);
        break;
    }
    return apply(c, sp, key, &v, err);
}

/* [s, e) without surrounding blanks, as a fresh string (NULL: no memory). */
static char *trimmed(const char *s, const char *e) {
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    char *d = malloc((size_t)(e - s) + 1);
    if (d) {
        memcpy(d, s, (size_t)(e - s));
        d[e - s] = 0;
    }
    return d;
}

/* A layer list continues over the items that are layer numbers or ranges. */
static bool layer_item(const char *item) {
    if (!isdigit((unsigned char)*item)) return false;
    for (const char *c = item; *c; c++)
        if (!isdigit((unsigned char)*c) && *c != '-') return false;
    return true;
}

/* State of one text configuration being split into items. */
typedef struct kv_parse {
    sp_spec_config *c;
    const char *list_key; /* a layer list being collected, under this spelling */
    char *list;           /* its text so far (owned) */
} kv_parse;

/* Hands a collected layer list to sp_spec_config_set. */
static sp_status flush_list(kv_parse *k, sp_error *err) {
    if (!k->list_key) return SP_OK;
    sp_status st = sp_spec_config_set(k->c, k->list_key, k->list, err);
    free(k->list);
    k->list = NULL;
    k->list_key = NULL;
    return st;
}

/* One item (already trimmed, non-empty): "key=value", a bare boolean, or
 * the next piece of a layer list. */
static sp_status parse_item(kv_parse *k, char *item, sp_error *err) {
    char *eq = strchr(item, '=');
    if (!eq && k->list_key && layer_item(item)) {
        size_t n = strlen(k->list), m = strlen(item);
        char *grown = realloc(k->list, n + m + 2);
        if (!grown) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
        grown[n] = ',';
        memcpy(grown + n + 1, item, m + 1);
        k->list = grown;
        return SP_OK;
    }
    sp_status st = flush_list(k, err);
    if (st) return st;
    if (!eq) return sp_spec_config_set(k->c, item, NULL, err);
    char *key = trimmed(item, eq), *val = trimmed(eq + 1, eq + 1 + strlen(eq + 1));
    if (!key || !val) {
        st = sp_fail(err, SP_ERR_NOMEM, "out of memory");
    } else {
        const spelling *sp = find_spelling(key);
        if (sp && sp->id == S_SKIP && *val) { /* collect the list until it ends */
            k->list_key = sp->name;
            k->list = val;
            val = NULL;
        } else {
            st = sp_spec_config_set(k->c, key, val, err);
        }
    }
    free(key);
    free(val);
    return st;
}

sp_status sp_spec_config_parse(sp_spec_config *c, const char *text, sp_error *err) {
    char *all = trimmed(text ? text : "", text ? text + strlen(text) : "");
    if (!all) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    sp_status st = SP_OK;
    kv_parse k = {.c = c};
    if (!*all) {
        st = sp_fail(err, SP_ERR_ARG, "empty configuration");
    } else if (!strcmp(all, "plain")) {
        st = sp_spec_config_set(c, "drafter", "none", err);
    } else {
        /* every comma separates items, so an empty item is an error */
        for (const char *p = all; !st;) {
            const char *comma = strchr(p, ',');
            char *item = trimmed(p, comma ? comma : p + strlen(p));
            if (!item) st = sp_fail(err, SP_ERR_NOMEM, "out of memory");
            else if (!*item)
                st = sp_fail(err, SP_ERR_ARG,
                             "empty setting (two commas in a row, or a comma at an end)");
            else st = parse_item(&k, item, err);
            free(item);
            if (!comma) break;
            p = comma + 1;
        }
        if (!st) st = flush_list(&k, err);
    }
    free(k.list);
    free(all);
    return st;
}

/* ---------------------------------------------------------------- JSON */

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Applies a parsed JSON value (an object, else the error names its kind). */
static sp_status config_json(sp_spec_config *c, const json_t *obj, sp_error *err) {
    if (!obj || !json_is_object(obj))
        return sp_fail(err, SP_ERR_ARG, "speculative settings: expected a JSON object, got %s",
                       obj ? json_kind(obj) : "nothing");
    const char *key;
    json_t *jv;
    json_object_foreach((json_t *)obj, key, jv) {
        const spelling *sp = find_spelling(key);
        if (!sp) return sp_fail(err, SP_ERR_ARG, "unknown setting '%s' (%s)", key, KEY_LIST);
        if (json_is_null(jv)) continue;
        value v = {0};
        const char *want = NULL;
        switch (sp->kind) {
        case V_NAME:
            if (!json_is_string(jv)) want = "a string";
            else if (strlen(json_string_value(jv)) != json_string_length(jv))
                return sp_fail(err, SP_ERR_ARG, "%s: contains a NUL character", key);
            else v.str = json_string_value(jv);
            break;
        case V_INT:
            if (!json_is_integer(jv)) want = "an integer";
            else v.i = json_integer_value(jv);
            break;
        case V_NUMBER:
            if (!json_is_number(jv)) want = "a number";
            else v.d = json_number_value(jv);
            break;
        case V_BOOL:
            if (!json_is_boolean(jv)) want = "true or false";
            else v.b = json_is_true(jv);
            break;
        }
        if (want) return sp_fail(err, SP_ERR_ARG, "%s: expected %s, got %s", key, want, json_kind(jv));
        if (sp->kind == V_NAME && !*v.str) return sp_fail(err, SP_ERR_ARG, "%s: empty value", key);
        sp_status st = apply(c, sp, key, &v, err);
        if (st) return st;
    }
    return SP_OK;
}

sp_status sp_spec_config_json_text(sp_spec_config *c, const char *text, size_t len,
                                   sp_error *err) {
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!j)
        return sp_fail(err, SP_ERR_ARG, "speculative settings: not valid JSON (%s at column %d)",
                       je.text, je.column);
    sp_status st = config_json(c, j, err);
    json_decref(j);
    return st;
}

/* -------------------------------------------------------------- finish */

static bool tree_verifier(sp_verifier v) {
    return v == SP_VERIFIER_MC || v == SP_VERIFIER_MC_NOREP || v == SP_VERIFIER_NAIVE ||
           v == SP_VERIFIER_GBV || v == SP_VERIFIER_TRAVERSAL;
}

static bool model_based(sp_drafter_kind k) {
    return k == SP_DRAFT_MODEL || k == SP_DRAFT_LAYERSKIP || k == SP_DRAFT_LOWBIT || k == SP_DRAFT_EAGLE3 ||
           k == SP_DRAFT_MTP;
}

sp_status sp_spec_config_finish(sp_spec_config *c, bool has_draft_model, sp_error *err) {
    sp_spec_params *p = &c->params;
    /* the drafter */
    if (!is_given(c, S_DRAFTER) && has_draft_model) p->draft.kind = SP_DRAFT_MODEL;
    const sp_drafter_kind kind = p->draft.kind;
    const bool plain = kind == SP_DRAFT_NONE;
    if (plain && !is_given(c, S_DRAFTER) && c->given) {
        for (int id = 0; id < S_COUNT; id++)
            if (is_given(c, (setting_id)id))
                for (size_t i = 0; i < N_SPELLINGS; i++)
                    if (SPELLINGS[i].id == (setting_id)id)
                        return sp_fail(err, SP_ERR_ARG,
                                       "%s: no drafter to use it with (set drafter: ngram, suffix, "
                                       "layerskip, lowbit, or model with a draft model)",
                                       SPELLINGS[i].name);
    }
    if (kind == SP_DRAFT_MODEL && !has_draft_model)
        return sp_fail(err, SP_ERR_ARG, "drafter: 'model' needs a draft model, and none was given");
    if (kind == SP_DRAFT_EAGLE3 && !has_draft_model)
        return sp_fail(err, SP_ERR_ARG, "drafter: 'eagle3' needs an EAGLE-3 head file, and none was given");
    /* chain or tree */
    if (is_given(c, S_TREE) && is_given(c, S_GAMMA))
        return sp_fail(err, SP_ERR_ARG, "gamma: a tree's shape sets the draft length; drop one");
    if (is_given(c, S_GAMMA) && !is_given(c, S_TREE) && p->tree.depth > 0) {
        p->tree = (sp_tree_shape){0}; /* a draft length asks for a chain */
        if (!is_given(c, S_VERIFIER) && tree_verifier(p->verifier)) p->verifier = SP_VERIFIER_BLOCK;
    }
    if (is_given(c, S_TREE) && !is_given(c, S_VERIFIER) && !tree_verifier(p->verifier) &&
        p->verifier != SP_VERIFIER_GREEDY)
        p->verifier = SP_VERIFIER_MC_NOREP;
    /* a chain whose length nobody chose (in any layer): the adaptive
     * controller picks it each iteration, 0 (plain decoding) included, up
     * to SP_SPEC_ADAPTIVE_GAMMA, so turning speculation on cannot make a
     * request slower than plain decoding by more than its probes */
    if (!plain && p->tree.depth == 0 && !p->length_set) {
        p->adaptive = true;
        p->gamma = SP_SPEC_ADAPTIVE_GAMMA;
    }
    /* settings the chosen drafter or verifier would ignore */
    const bool is_map = kind == SP_DRAFT_NGRAM_MAP_K || kind == SP_DRAFT_NGRAM_MAP_K4V;
    const struct {
        setting_id id;
        bool unused;
        const char *why;
    } unused[] = {
        {S_VERIFIER, plain, "plain decoding has no verifier"},
        {S_GAMMA, plain, "plain decoding drafts nothing"},
        {S_ADAPTIVE, plain, "plain decoding drafts nothing"},
        {S_P_MIN, plain && !c->off_by_n_max, "plain decoding drafts nothing"},
        {S_N_MIN, plain && !c->off_by_n_max, "plain decoding drafts nothing"},
        {S_TREE, !model_based(kind) && kind != SP_DRAFT_SUFFIX,
         "trees need a model-based drafter (model, layerskip, lowbit, eagle3, mtp) or suffix"},
        {S_TREE, p->draft.with_suffix, "arbitration with suffix drafts chains, not trees"},
        {S_NGRAM_MIN, kind != SP_DRAFT_NGRAM && kind != SP_DRAFT_NGRAM_CACHE,
         "only the ngram and ngram-cache drafters use it"},
        {S_NGRAM_MAX, kind != SP_DRAFT_NGRAM && kind != SP_DRAFT_NGRAM_CACHE,
         "only the ngram and ngram-cache drafters use it"},
        {S_MAP_N, !is_map, "only the ngram-map-k and ngram-map-k4v drafters use it"},
        {S_MAP_M, !is_map, "only the ngram-map-k and ngram-map-k4v drafters use it"},
        {S_MAP_HITS, kind != SP_DRAFT_NGRAM_MAP_K4V, "only the ngram-map-k4v drafter uses it"},
        {S_MOD_MATCH, kind != SP_DRAFT_NGRAM_MOD, "only the ngram-mod drafter uses it"},
        {S_MOD_MIN, kind != SP_DRAFT_NGRAM_MOD, "only the ngram-mod drafter uses it"},
        {S_MOD_MAX, kind != SP_DRAFT_NGRAM_MOD, "only the ngram-mod drafter uses it"},
        {S_SKIP, kind != SP_DRAFT_LAYERSKIP, "only the layerskip drafter uses it"},
        {S_LOWBIT, kind != SP_DRAFT_LOWBIT, "only the lowbit drafter uses it"},
        {S_LENIENCE, p->verifier != SP_VERIFIER_LENIENT, "only the lenient verifier uses it"},
    };
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++)
        if (is_given(c, unused[i].id) && unused[i].unused) {
            const char *name = "?";
            for (size_t k = 0; k < N_SPELLINGS; k++)
                if (SPELLINGS[k].id == unused[i].id) {
                    name = SPELLINGS[k].name;
                    break;
                }
            return sp_fail(err, SP_ERR_ARG, "%s: %s", name, unused[i].why);
        }
    return plain ? SP_OK : sp_spec_config_check_params(p, err);
}

/* ------------------------------------------------------------- checks */

sp_status sp_spec_config_check_params(const sp_spec_params *p, sp_error *err) {
    const sp_drafter_kind kind = p->draft.kind;
    if ((unsigned)kind > SP_DRAFT_MTP)
        return sp_fail(err, SP_ERR_ARG, "drafter: unknown kind %d", (int)kind);
    if (kind == SP_DRAFT_NONE) return SP_OK; /* nothing else is used */
    if ((unsigned)p->verifier > SP_VERIFIER_TRAVERSAL)
        return sp_fail(err, SP_ERR_ARG, "verifier: unknown kind %d", (int)p->verifier);
    if (p->gamma < 1 || p->gamma > SP_SPEC_MAX_GAMMA)
        return sp_fail(err, SP_ERR_ARG, "gamma: must be in [1, %d], got %d", SP_SPEC_MAX_GAMMA,
                       p->gamma);
    if (p->draft_n_min < 0 || (p->tree.depth == 0 && p->draft_n_min > p->gamma))
        return sp_fail(err, SP_ERR_ARG, "n_min: must be in [0, gamma = %d], got %d", p->gamma,
                       p->draft_n_min);
    if (!(p->draft_p_min >= 0 && p->draft_p_min <= 1))
        return sp_fail(err, SP_ERR_ARG, "p_min: must be in [0, 1], got %g", (double)p->draft_p_min);
    if (p->verifier == SP_VERIFIER_LENIENT && !(p->lenience > 0 && p->lenience <= 1))
        return sp_fail(err, SP_ERR_ARG, "lenience: must be in (0, 1], got %g", p->lenience);
    if (kind == SP_DRAFT_NGRAM &&
        (p->draft.ngram_min < 1 || p->draft.ngram_max > SP_NGRAM_MAX ||
         p->draft.ngram_min > p->draft.ngram_max))
        return sp_fail(err, SP_ERR_ARG, "ngram_min: need 1 <= ngram_min (%d) <= ngram_max (%d) <= %d",
                       p->draft.ngram_min, p->draft.ngram_max, SP_NGRAM_MAX);
    if (kind == SP_DRAFT_NGRAM_CACHE &&
        (p->draft.ngram_min < 1 || p->draft.ngram_max > 4 || p->draft.ngram_min > p->draft.ngram_max))
        return sp_fail(err, SP_ERR_ARG,
                       "ngram_max: ngram-cache needs 1 <= ngram_min (%d) <= ngram_max (%d) <= 4",
                       p->draft.ngram_min, p->draft.ngram_max);
    if ((kind == SP_DRAFT_NGRAM_MAP_K || kind == SP_DRAFT_NGRAM_MAP_K4V) &&
        (p->draft.map_n < 1 || p->draft.map_n > 1024 || p->draft.map_m < 1 || p->draft.map_m > 1024 ||
         p->draft.map_min_hits < 1 || p->draft.map_min_hits > 1024))
        return sp_fail(err, SP_ERR_ARG, "map_n, map_m, map_min_hits: each must be in [1, 1024] (got %d, %d, %d)",
                       p->draft.map_n, p->draft.map_m, p->draft.map_min_hits);
    if (kind == SP_DRAFT_NGRAM_MOD &&
        (p->draft.mod_n_match < 1 || p->draft.mod_n_match > 1024 || p->draft.mod_n_min < 0 ||
         p->draft.mod_n_max < 1 || p->draft.mod_n_min > p->draft.mod_n_max || p->draft.mod_n_max > 1024))
        return sp_fail(err, SP_ERR_ARG,
                       "mod_n_min: need 1 <= mod_n_match (%d) <= 1024 and 0 <= mod_n_min (%d) <= "
                       "mod_n_max (%d) <= 1024",
                       p->draft.mod_n_match, p->draft.mod_n_min, p->draft.mod_n_max);
    if (memchr(p->draft.skip_layers, 0, sizeof p->draft.skip_layers) == NULL)
        return sp_fail(err, SP_ERR_ARG, "skip_layers: not terminated");
    if (p->tree.depth > 0) {
        sp_tree_shape sh;
        sp_error e = {0};
        if (p->tree.dyn_k ? sp_tree_shape_make_dyn(p->tree.dyn_k, p->tree.depth, p->tree.n_nodes - 1, &sh, &e)
                          : sp_tree_shape_make(p->tree.branch, p->tree.depth, &sh, &e) ||
                                sh.n_nodes != p->tree.n_nodes)
            return sp_fail(err, SP_ERR_ARG, "tree: invalid shape (%s)", e.msg[0] ? e.msg : "node count");
        if (p->tree.dyn_k && !model_based(kind))
            return sp_fail(err, SP_ERR_ARG,
                           "tree: dynamic trees need a model-based drafter (model, layerskip, lowbit, eagle3, "
                           "mtp), not %s",
                           sp_drafter_name(kind));
        if (p->tree.dyn_k && (p->verifier == SP_VERIFIER_TRAVERSAL || p->verifier == SP_VERIFIER_GBV))
            return sp_fail(err, SP_ERR_ARG,
                           "verifier: %s assumes a tree shape fixed before drafting; a dynamic tree is "
                           "verified with mc, mc-norep, naive or greedy",
                           sp_verifier_name(p->verifier));
        if (p->draft.with_suffix)
            return sp_fail(err, SP_ERR_ARG, "tree: arbitration with suffix drafts chains, not trees");
        if (!model_based(kind) && kind != SP_DRAFT_SUFFIX)
            return sp_fail(err, SP_ERR_ARG,
                           "tree: trees need a model-based drafter (model, layerskip, lowbit, eagle3, mtp) or "
                           "suffix, not %s",
                           sp_drafter_name(kind));
        if (!tree_verifier(p->verifier) && p->verifier != SP_VERIFIER_GREEDY)
            return sp_fail(err, SP_ERR_ARG,
                           "tree: trees are verified with mc, mc-norep, naive, gbv, traversal or "
                           "greedy, not %s",
                           sp_verifier_name(p->verifier));
    } else if (p->tree.depth < 0) {
        return sp_fail(err, SP_ERR_ARG, "tree: invalid shape (depth %d)", p->tree.depth);
    } else if (tree_verifier(p->verifier)) {
        return sp_fail(err, SP_ERR_ARG, "verifier: %s verifies a draft tree; set tree",
                       sp_verifier_name(p->verifier));
    }
    return SP_OK;
}

int32_t sp_spec_config_budget(const sp_spec_params *p) {
    if (p->draft.kind == SP_DRAFT_NONE) return 0;
    return p->tree.depth > 0 ? p->tree.n_nodes - 1 : p->gamma;
}

int32_t sp_spec_config_batch(const sp_spec_params *p) {
    /* the uncommitted tail token, the root's logits row and the budget */
    int32_t need = p->draft.kind == SP_DRAFT_NONE ? 0 : sp_spec_config_budget(p) + 2;
    return need > SP_CTX_DEFAULT_BATCH ? need : SP_CTX_DEFAULT_BATCH;
}

int32_t sp_spec_config_extra_ctx(const sp_spec_params *p) {
    if (p->draft.kind == SP_DRAFT_NONE || p->tree.depth <= 0) return 0;
    /* a dynamic tree's drafter caches the K nodes it evaluates per level
     * but the last, which may be more than the N nodes kept */
    const int32_t evaluated = p->tree.dyn_k * (p->tree.depth - 1) + 1;
    return p->tree.dyn_k && evaluated > p->tree.n_nodes ? evaluated : p->tree.n_nodes;
}

/* Room the draft budget needs in the context besides the text. */
#define SPEC_CTX_SLACK 8

sp_status sp_spec_config_check(const sp_spec_params *p, const sp_ctx *target, sp_error *err) {
    sp_status st = sp_spec_config_check_params(p, err);
    if (st || p->draft.kind == SP_DRAFT_NONE) return st;
    if ((st = sp_drafter_params_check(&p->draft, sp_ctx_model(target), err))) return st;
    /* the rows a verification needs (the uncommitted token, the root's
     * logits row, the budget); sp_spec_config_batch's prefill floor is a
     * preference, not a need (a server's slots keep smaller batches) */
    const int32_t budget = sp_spec_config_budget(p), batch = budget + 2;
    const char *what = p->tree.depth > 0 ? "tree" : "gamma";
    if (batch > sp_ctx_max_batch(target))
        return sp_fail(err, SP_ERR_RANGE,
                       "%s: a draft budget of %d tokens needs a target batch of %d, the context "
                       "has %d",
                       what, budget, batch, sp_ctx_max_batch(target));
    if (budget + 1 + SPEC_CTX_SLACK > sp_ctx_n_ctx(target))
        return sp_fail(err, SP_ERR_RANGE, "%s: a draft budget of %d tokens does not fit the "
                       "context of %d", what, budget, sp_ctx_n_ctx(target));
    return SP_OK;
}

sp_status sp_spec_config_check_sampling(const sp_spec_params *p, const sp_sampler_params *s,
                                        sp_error *err) {
    if (p->draft.kind != SP_DRAFT_NONE && p->verifier == SP_VERIFIER_GREEDY && s->temperature != 0)
        return sp_fail(err, SP_ERR_ARG,
                       "verifier: greedy needs temperature 0 (it is lossy otherwise)");
    return SP_OK;
}
