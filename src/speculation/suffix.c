/* suffix: suffix drafting over the request's text and a shared FIFO corpus of
 * earlier outputs; see suffix.h for the method, bounds and contracts. */
#include "sp_spec.h"

#include <pthread.h>

#include "clock.h"
#include "rng.h"
#include "suffix.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- depth-bounded suffix trie ----
 * Node 0 is the root (the empty string). A node is one substring; its
 * children extend it by one token. count[v]: occurrences of v's substring;
 * kids[v]: occurrences followed by another token (sum of the children's
 * counts); best[v]: the child with the largest count (the first to reach
 * it), -1 if none. Children are found through an open-addressing hash of
 * (parent, token). */

typedef struct trie {
    int32_t cap;            /* nodes */
    int32_t n;              /* nodes in use (root included) */
    int32_t *count, *kids, *best, *tok;
    int32_t *first, *next; /* children lists: first child, next sibling (-1 ends) */
    uint8_t *depth;
    uint64_t *hkey;         /* [hcap]: (parent + 1) << 32 | token; 0 = empty */
    int32_t *hval;          /* [hcap] */
    uint64_t hmask;
    /* streaming insertion: act[j] = node of the last j + 1 tokens */
    int32_t act[SP_SUFFIX_DEPTH];
    int32_t n_act;
} trie;

static void trie_free(trie *t) {
    free(t->count);
    free(t->kids);
    free(t->best);
    free(t->tok);
    free(t->first);
    free(t->next);
    free(t->depth);
    free(t->hkey);
    free(t->hval);
    memset(t, 0, sizeof *t);
}

static int64_t trie_bytes(const trie *t) {
    return (int64_t)t->cap * (6 * 4 + 1) + (int64_t)(t->hmask + 1) * 12;
}

static void trie_clear(trie *t) {
    if (t->n > 1) memset(t->hkey, 0, sizeof(uint64_t) * (size_t)(t->hmask + 1));
    t->n = 1;
    t->count[0] = t->kids[0] = 0;
    t->best[0] = -1;
    t->tok[0] = -1;
    t->first[0] = t->next[0] = -1;
    t->depth[0] = 0;
    t->n_act = 0;
}

static sp_status trie_init(trie *t, int64_t cap, sp_error *err) {
    memset(t, 0, sizeof *t);
    uint64_t h = 1024;
    while (h < (uint64_t)cap * 2) h <<= 1;
    t->cap = (int32_t)cap;
    t->hmask = h - 1;
    t->count = malloc(sizeof(int32_t) * (size_t)cap);
    t->kids = malloc(sizeof(int32_t) * (size_t)cap);
    t->best = malloc(sizeof(int32_t) * (size_t)cap);
    t->tok = malloc(sizeof(int32_t) * (size_t)cap);
    t->first = malloc(sizeof(int32_t) * (size_t)cap);
    t->next = malloc(sizeof(int32_t) * (size_t)cap);
    t->depth = malloc((size_t)cap);
    t->hkey = calloc(h, sizeof(uint64_t));
    t->hval = malloc(sizeof(int32_t) * h);
    if (!t->count || !t->kids || !t->best || !t->tok || !t->first || !t->next || !t->depth ||
        !t->hkey || !t->hval) {
        trie_free(t);
        return sp_fail(err, SP_ERR_NOMEM, "suffix: out of memory for %lld trie nodes",
                       (long long)cap);
    }
    t->n = 1; /* the table is already empty */
    trie_clear(t);
    return SP_OK;
}

static inline uint64_t hkey(int32_t parent, int32_t token) {
    return ((uint64_t)(uint32_t)(parent + 1) << 32) | (uint32_t)token;
}

static inline uint64_t hslot(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 20; }

static int32_t trie_child(const trie *t, int32_t v, int32_t token) {
    const uint64_t k = hkey(v, token);
    for (uint64_t i = hslot(k) & t->hmask;; i = (i + 1) & t->hmask) {
        if (t->hkey[i] == k) return t->hval[i];
        if (t->hkey[i] == 0) return -1;
    }
}

/* Child of v for token, counted once more; created if absent and there is
 * room (else -1 and nothing counted). */
static int32_t trie_bump(trie *t, int32_t v, int32_t token) {
    const uint64_t k = hkey(v, token);
    uint64_t i = hslot(k) & t->hmask;
    for (; t->hkey[i] != 0; i = (i + 1) & t->hmask)
        if (t->hkey[i] == k) break;
    int32_t c;
    if (t->hkey[i] == k) {
        c = t->hval[i];
    } else {
        if (t->n >= t->cap) return -1;
        c = t->n++;
        t->hkey[i] = k;
        t->hval[i] = c;
        t->count[c] = t->kids[c] = 0;
        t->best[c] = -1;
        t->tok[c] = token;
        t->first[c] = -1;
        t->next[c] = t->first[v];
        t->first[v] = c;
        t->depth[c] = (uint8_t)(t->depth[v] + 1);
    }
    t->count[c]++;
    t->kids[v]++;
    if (t->best[v] < 0 || t->count[c] > t->count[t->best[v]]) t->best[v] = c;
    return c;
}

/* Append one token to the text being indexed: every suffix of the last
 * SP_SUFFIX_DEPTH tokens ending with it is counted once more. */
static void trie_push(trie *t, int32_t token) {
    int32_t nxt[SP_SUFFIX_DEPTH], m = 0;
    t->count[0]++;
    int32_t c = trie_bump(t, 0, token);
    if (c >= 0) {
        nxt[m++] = c;
        for (int32_t j = 0; j < t->n_act && m < SP_SUFFIX_DEPTH; j++) {
            c = trie_bump(t, t->act[j], token);
            if (c < 0) break;
            nxt[m++] = c;
        }
    }
    memcpy(t->act, nxt, sizeof(int32_t) * (size_t)m);
    t->n_act = m;
}

static void trie_end_doc(trie *t) { t->n_act = 0; }

/* Node of seq[0..len) from the root, or -1. */
static int32_t trie_walk(const trie *t, const int32_t *seq, int32_t len) {
    int32_t v = 0;
    for (int32_t i = 0; i < len && v >= 0; i++) v = trie_child(t, v, seq[i]);
    return v;
}

/* Longest suffix of seq[0..len) (at most SP_SUFFIX_DEPTH - 1 tokens) whose
 * node has a continuation: its node (or -1) and length in *m. Having a
 * continuation is monotone in the suffix length, so the scan stops at the
 * first failure. */
static int32_t trie_match(const trie *t, const int32_t *seq, int32_t len, int32_t *m) {
    int32_t best = -1, bm = 0;
    const int32_t top = len < SP_SUFFIX_DEPTH - 1 ? len : SP_SUFFIX_DEPTH - 1;
    for (int32_t k = 1; k <= top; k++) {
        int32_t v = trie_walk(t, seq + len - k, k);
        if (v < 0 || t->kids[v] == 0) break;
        best = v;
        bm = k;
    }
    *m = bm;
    return best;
}

/* ---- the corpus ---- */

struct sp_suffix_corpus {
    pthread_mutex_t mu;
    int32_t max_tokens;
    int32_t *buf;     /* [max_tokens] documents back to back, oldest first */
    int32_t *doc_len; /* [max_tokens] lengths of the documents in buf */
    int32_t n_tok, n_docs;
    trie t;
};

sp_status sp_suffix_corpus_init(int32_t max_tokens, sp_suffix_corpus **out, sp_error *err) {
    if (!out) return sp_fail(err, SP_ERR_ARG, "suffix corpus: NULL output");
    *out = NULL;
    if (max_tokens == 0) max_tokens = SP_SUFFIX_CORPUS_TOKENS;
    if (max_tokens < 1 || max_tokens > SP_SUFFIX_MAX_TOKENS)
        return sp_fail(err, SP_ERR_ARG, "suffix corpus: %d tokens outside [1, %d]", (int)max_tokens,
                       SP_SUFFIX_MAX_TOKENS);
    sp_suffix_corpus *c = calloc(1, sizeof *c);
    if (!c) return sp_fail(err, SP_ERR_NOMEM, "suffix corpus: out of memory");
    c->max_tokens = max_tokens;
    c->buf = malloc(sizeof(int32_t) * (size_t)max_tokens);
    c->doc_len = malloc(sizeof(int32_t) * (size_t)max_tokens);
    sp_status st = c->buf && c->doc_len ? SP_OK : sp_fail(err, SP_ERR_NOMEM, "suffix corpus: out of memory");
    if (!st) st = trie_init(&c->t, (int64_t)max_tokens * SP_SUFFIX_DEPTH + 1, err);
    if (st) {
        free(c->buf);
        free(c->doc_len);
        free(c);
        return st;
    }
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return SP_OK;
}

void sp_suffix_corpus_free(sp_suffix_corpus *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    trie_free(&c->t);
    free(c->buf);
    free(c->doc_len);
    free(c);
}

static void corpus_index_doc(sp_suffix_corpus *c, const int32_t *tok, int32_t n) {
    for (int32_t i = 0; i < n; i++) trie_push(&c->t, tok[i]);
    trie_end_doc(&c->t);
}

sp_status sp_suffix_corpus_add(sp_suffix_corpus *c, const int32_t *tokens, int32_t n,
                               sp_error *err) {
    if (!c || (n > 0 && !tokens)) return sp_fail(err, SP_ERR_ARG, "suffix corpus: NULL argument");
    if (n <= 0) return SP_OK;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0)
            return sp_fail(err, SP_ERR_ARG, "suffix corpus: token %d is %d", (int)i, (int)tokens[i]);
    if (n > c->max_tokens) {
        tokens += n - c->max_tokens;
        n = c->max_tokens;
    }
    pthread_mutex_lock(&c->mu);
    if (c->n_tok + n > c->max_tokens) {
        /* drop the oldest outputs down to 3/4 of the bound (fewer rebuilds),
         * then rebuild the trie from what is kept */
        int32_t keep_room = c->max_tokens - c->max_tokens / 4;
        int32_t target = keep_room - n > 0 ? keep_room - n : 0;
        int32_t drop_docs = 0, drop_tok = 0;
        while (drop_docs < c->n_docs && c->n_tok - drop_tok > target)
            drop_tok += c->doc_len[drop_docs++];
        memmove(c->buf, c->buf + drop_tok, sizeof(int32_t) * (size_t)(c->n_tok - drop_tok));
        memmove(c->doc_len, c->doc_len + drop_docs, sizeof(int32_t) * (size_t)(c->n_docs - drop_docs));
        c->n_tok -= drop_tok;
        c->n_docs -= drop_docs;
        trie_clear(&c->t);
        for (int32_t d = 0, at = 0; d < c->n_docs; at += c->doc_len[d++])
            corpus_index_doc(c, c->buf + at, c->doc_len[d]);
    }
    memcpy(c->buf + c->n_tok, tokens, sizeof(int32_t) * (size_t)n);
    c->doc_len[c->n_docs++] = n;
    c->n_tok += n;
    corpus_index_doc(c, tokens, n);
    pthread_mutex_unlock(&c->mu);
    return SP_OK;
}

sp_suffix_stats sp_suffix_corpus_stats(sp_suffix_corpus *c) {
    sp_suffix_stats s = {0};
    if (!c) return s;
    pthread_mutex_lock(&c->mu);
    s.corpus_tokens = c->n_tok;
    s.corpus_docs = c->n_docs;
    s.corpus_nodes = c->t.n;
    s.bytes = trie_bytes(&c->t) + (int64_t)c->max_tokens * 8;
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* ---- the drafter ---- */

#define N_BUCKETS 6
#define MAX_CHAIN 64    /* longest proposal (>= SP_SPEC_MAX_GAMMA) */
#define PRIOR_ACC 4.0   /* acceptance prior: 4 of 5 tokens */
#define PRIOR_TRIED 5.0
#define DECAY 0.97      /* evidence kept per step: a bucket that stopped
                         * proposing drifts back to the prior and tries again */

struct sp_suffix {
    sp_suffix_corpus *corpus;
    bool own_corpus;
    int32_t max_req;   /* request tokens indexed at most */
    trie req;
    int32_t *text;     /* [max_req] the request tokens indexed */
    int32_t n_text;    /* tokens indexed (<= max_req) */
    int32_t n_seen;    /* length of the text given last (>= n_text) */
    int32_t last_tok;  /* hist[n_seen - 1] */
    int32_t n_prompt;  /* text length at the request's first proposal; -1 before */
    double acc[2][N_BUCKETS], tried[2][N_BUCKETS];
    bool whole_text;   /* the corpus gets prompt and output (ngram-cache), else the output */
    int32_t last_src, last_bucket, last_len; /* the last proposal */
    double last_expect;
    sp_suffix_stats st;
};

static int32_t bucket_of(int32_t m) {
    return m <= 1 ? 0 : m == 2 ? 1 : m <= 4 ? 2 : m <= 8 ? 3 : m <= 16 ? 4 : 5;
}

sp_status sp_suffix_init(sp_suffix_corpus *corpus, int32_t request_tokens, sp_suffix **out,
                         sp_error *err) {
    if (!out) return sp_fail(err, SP_ERR_ARG, "suffix: NULL output");
    *out = NULL;
    if (request_tokens == 0) request_tokens = SP_SUFFIX_REQUEST_TOKENS;
    if (request_tokens < 1 || request_tokens > SP_SUFFIX_MAX_TOKENS)
        return sp_fail(err, SP_ERR_ARG, "suffix: request bound %d outside [1, %d]",
                       (int)request_tokens, SP_SUFFIX_MAX_TOKENS);
    sp_suffix *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SP_ERR_NOMEM, "suffix: out of memory");
    s->max_req = request_tokens;
    s->n_prompt = -1;
    s->last_src = -1;
    sp_status st = SP_OK;
    if (!corpus) {
        st = sp_suffix_corpus_init(0, &s->corpus, err);
        s->own_corpus = true;
    } else {
        s->corpus = corpus;
    }
    if (!st) st = trie_init(&s->req, (int64_t)request_tokens * SP_SUFFIX_DEPTH + 1, err);
    if (!st && !(s->text = malloc(sizeof(int32_t) * (size_t)request_tokens)))
        st = sp_fail(err, SP_ERR_NOMEM, "suffix: out of memory");
    if (st) {
        sp_suffix_free(s);
        return st;
    }
    *out = s;
    return SP_OK;
}

void sp_suffix_free(sp_suffix *s) {
    if (!s) return;
    if (s->own_corpus) sp_suffix_corpus_free(s->corpus);
    trie_free(&s->req);
    free(s->text);
    free(s);
}

sp_status sp_suffix_end_request(sp_suffix *s, sp_error *err) {
    if (!s) return sp_fail(err, SP_ERR_ARG, "suffix: NULL drafter");
    sp_status st = SP_OK;
    const int32_t from = s->whole_text ? 0 : s->n_prompt;
    if (s->n_prompt >= 0 && s->n_text > from)
        st = sp_suffix_corpus_add(s->corpus, s->text + from, s->n_text - from, err);
    trie_clear(&s->req);
    s->n_text = s->n_seen = 0;
    s->n_prompt = -1;
    s->last_src = -1;
    return st;
}

/* Chain from node v of trie t over text seq[0..len):
 * follows the most frequent children while the running product of
 * (empirical probability x acceptance rate a) stays >= SP_SUFFIX_MIN_SCORE,
 * re-matching on seq + chain when the trie's depth runs out. Returns the
 * length; *expect = sum of the products (expected accepted tokens). */
static int32_t chain(const trie *t, int32_t v, const int32_t *seq, int32_t len, double a,
                     int32_t max_len, int32_t *out, double *expect) {
    int32_t tail[2 * SP_SUFFIX_DEPTH];
    int32_t nt = len < SP_SUFFIX_DEPTH ? len : SP_SUFFIX_DEPTH;
    memcpy(tail, seq + len - nt, sizeof(int32_t) * (size_t)nt);
    double score = 1.0, sum = 0.0;
    int32_t k = 0;
    while (k < max_len && v >= 0) {
        int32_t c = t->best[v];
        if (c < 0) { /* depth exhausted (or a dead end): match again */
            int32_t m2;
            v = trie_match(t, tail, nt, &m2);
            if (v < 0 || m2 == 0) break;
            continue;
        }
        score *= a * (double)t->count[c] / (double)t->kids[v];
        if (score < SP_SUFFIX_MIN_SCORE) break;
        sum += score;
        out[k++] = t->tok[c];
        if (nt == 2 * SP_SUFFIX_DEPTH) { /* keep the last SP_SUFFIX_DEPTH */
            memmove(tail, tail + SP_SUFFIX_DEPTH, sizeof(int32_t) * SP_SUFFIX_DEPTH);
            nt = SP_SUFFIX_DEPTH;
        }
        tail[nt++] = t->tok[c];
        v = c; /* at the maximum depth it has no child: the next turn matches again */
    }
    *expect = sum;
    return k;
}

static double rate(const sp_suffix *s, int src, int32_t m) {
    int b = bucket_of(m);
    return (s->acc[src][b] + PRIOR_ACC) / (s->tried[src][b] + PRIOR_TRIED);
}

/* Index hist[0..n) (the tokens not yet indexed; a text that does not
 * continue the indexed one starts a new request) and age the acceptance
 * evidence by one step. */
static sp_status index_text(sp_suffix *s, const int32_t *hist, int32_t n, sp_error *err) {
    if (n < s->n_seen || (s->n_seen > 0 && hist[s->n_seen - 1] != s->last_tok) ||
        (s->n_text > 0 && hist[0] != s->text[0])) {
        sp_status st = sp_suffix_end_request(s, err);
        if (st) return st;
    }
    for (int32_t i = s->n_seen; i < n; i++) {
        if (hist[i] < 0) return sp_fail(err, SP_ERR_ARG, "suffix: token %d is %d", (int)i, (int)hist[i]);
        if (s->n_text < s->max_req) {
            s->text[s->n_text++] = hist[i];
            trie_push(&s->req, hist[i]);
        }
    }
    s->n_seen = n;
    if (n > 0) s->last_tok = hist[n - 1];
    if (s->n_prompt < 0) s->n_prompt = s->n_text;
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < N_BUCKETS; b++) {
            s->acc[i][b] *= DECAY;
            s->tried[i][b] *= DECAY;
        }
    return SP_OK;
}

/* The better source for continuing hist[0..n): its chain (up to max_len
 * tokens) into out, its matched node and match length. Returns the source
 * (0 request, 1 corpus) and the chain length in *len (0: nothing to
 * propose). The corpus mutex is taken and released inside. */
static int pick(sp_suffix *s, const int32_t *hist, int32_t n, int32_t max_len, int32_t *out,
                int32_t *len, int32_t *node, int32_t *mlen, double *expect) {
    int32_t buf[2][MAX_CHAIN], l[2] = {0, 0}, m[2] = {0, 0}, v[2] = {-1, -1};
    double ex[2] = {0, 0};
    if (max_len > MAX_CHAIN) max_len = MAX_CHAIN;
    if (s->n_text == n) { /* the request trie covers the whole text: the
                           * streaming path holds every suffix's node; the
                           * longest with a continuation (monotone) */
        for (int32_t j = 0; j < s->req.n_act && j < SP_SUFFIX_DEPTH - 1; j++) {
            if (s->req.kids[s->req.act[j]] == 0) break;
            v[0] = s->req.act[j];
            m[0] = j + 1;
        }
        if (v[0] >= 0) l[0] = chain(&s->req, v[0], hist, n, rate(s, 0, m[0]), max_len, buf[0], &ex[0]);
    }
    pthread_mutex_lock(&s->corpus->mu);
    v[1] = trie_match(&s->corpus->t, hist, n, &m[1]);
    if (v[1] >= 0)
        l[1] = chain(&s->corpus->t, v[1], hist, n, rate(s, 1, m[1]), max_len, buf[1], &ex[1]);
    pthread_mutex_unlock(&s->corpus->mu);
    const int src = ex[1] > ex[0] ? 1 : 0;
    memcpy(out, buf[src], sizeof(int32_t) * (size_t)l[src]);
    *len = l[src];
    *node = v[src];
    *mlen = m[src];
    *expect = ex[src];
    return src;
}

static void note_time(sp_suffix *s, double dt) {
    s->st.steps++;
    s->st.seconds += dt;
    if (dt > s->st.max_step_seconds) s->st.max_step_seconds = dt;
}

static void note_proposal(sp_suffix *s, int src, int32_t mlen, int32_t len) {
    s->last_src = src;
    s->last_bucket = bucket_of(mlen);
    s->last_len = len;
    s->st.proposals++;
    s->st.proposed += len;
    s->st.from_corpus += src;
}

sp_status sp_suffix_propose(sp_suffix *s, const int32_t *hist, int32_t n, int32_t max_len,
                            int32_t *out, int32_t *n_out, sp_error *err) {
    if (!s || !n_out || (n > 0 && !hist) || (max_len > 0 && !out) || n < 0 || max_len < 0)
        return sp_fail(err, SP_ERR_ARG, "suffix: bad arguments");
    *n_out = 0;
    s->last_src = -1;
    s->last_expect = 0;
    const double t0 = sp_now();
    sp_status st = index_text(s, hist, n, err);
    if (!st && max_len > 0 && n > 0) {
        int32_t len, node, mlen;
        double ex;
        const int src = pick(s, hist, n, max_len, out, &len, &node, &mlen, &ex);
        if (len > 0) {
            *n_out = len;
            note_proposal(s, src, mlen, len);
            s->last_expect = ex;
        }
    }
    note_time(s, sp_now() - t0);
    return st;
}

static sp_status grow_tree(sp_suffix *s, const int32_t *hist, int32_t n, const int32_t *branch,
                           int32_t depth, int32_t max_nodes, bool greedy, bool norep, sp_rng *rng,
                           int32_t V, sp_suffix_tree *t, sp_error *err);

sp_status sp_suffix_propose_tree(sp_suffix *s, const int32_t *hist, int32_t n,
                                 const int32_t *branch, int32_t depth, int32_t max_nodes,
                                 bool greedy, bool norep, sp_rng *rng, int32_t V,
                                 sp_suffix_tree *t, sp_error *err) {
    if (!s || !t || !branch || !t->parent || !t->token || !t->depth || !t->q || n < 1 || !hist ||
        depth < 0 || max_nodes < 1 || max_nodes > SP_TREE_MAX_NODES || V < 1 || (!greedy && !rng))
        return sp_fail(err, SP_ERR_ARG, "suffix tree: bad arguments");
    s->last_src = -1;
    t->n_nodes = 1;
    t->parent[0] = -1;
    t->token[0] = hist[n - 1];
    t->depth[0] = 0;
    const double t0 = sp_now();
    sp_status st = grow_tree(s, hist, n, branch, depth, max_nodes, greedy, norep, rng, V, t, err);
    note_time(s, sp_now() - t0);
    return st;
}

static sp_status grow_tree(sp_suffix *s, const int32_t *hist, int32_t n, const int32_t *branch,
                           int32_t depth, int32_t max_nodes, bool greedy, bool norep, sp_rng *rng,
                           int32_t V, sp_suffix_tree *t, sp_error *err) {
    sp_status st = index_text(s, hist, n, err);
    if (st || depth == 0) return st;
    int32_t tmp[MAX_CHAIN], len, v0, mlen;
    double ex;
    const int src = pick(s, hist, n, depth, tmp, &len, &v0, &mlen, &ex);
    if (len == 0) return SP_OK;
    const trie *tr = src ? &s->corpus->t : &s->req;
    const double a = rate(s, src, mlen);
    if (src) pthread_mutex_lock(&s->corpus->mu);
    int32_t tv[SP_TREE_MAX_NODES];
    double sc[SP_TREE_MAX_NODES];
    tv[0] = v0;
    sc[0] = 1.0;
    int32_t max_d = 0;
    for (int32_t i = 0; i < t->n_nodes && t->depth[i] < depth; i++) {
        /* the k most frequent continuations still scoring >= SP_SUFFIX_MIN_SCORE */
        const int32_t v = tv[i], k = branch[t->depth[i]];
        int32_t top[SP_TREE_MAX_NODES], nt = 0;
        if (tr->kids[v] == 0) continue;
        for (int32_t c = tr->first[v]; c >= 0; c = tr->next[c]) {
            if (sc[i] * a * tr->count[c] / tr->kids[v] < SP_SUFFIX_MIN_SCORE) continue;
            int32_t j; /* insertion into the top k, kept sorted by count */
            if (nt < k) {
                j = nt++;
            } else if (tr->count[c] > tr->count[top[k - 1]]) {
                j = k - 1;
            } else {
                continue;
            }
            top[j] = c;
            while (j > 0 && tr->count[top[j]] > tr->count[top[j - 1]]) {
                int32_t x = top[j];
                top[j] = top[j - 1];
                top[j - 1] = x;
                j--;
            }
        }
        if (nt == 0) continue;
        /* q: their counts normalised; children: all of them in an order drawn
         * without replacement from q, or k i.i.d. draws (greedy: by count) */
        double tot = 0;
        for (int32_t j = 0; j < nt; j++) tot += tr->count[top[j]];
        float *qi = t->q + (size_t)i * V;
        memset(qi, 0, sizeof(float) * (size_t)V);
        double w[SP_TREE_MAX_NODES];
        for (int32_t j = 0; j < nt; j++) {
            w[j] = tr->count[top[j]] / tot;
            if (tr->tok[top[j]] < V) qi[tr->tok[top[j]]] = (float)w[j];
        }
        const int32_t n_kids = greedy || norep ? nt : k;
        for (int32_t j = 0; j < n_kids && t->n_nodes < max_nodes; j++) {
            int32_t pickj = j;
            if (!greedy) { /* inverse CDF over the remaining weights */
                double rem = 0;
                for (int32_t x = 0; x < nt; x++) rem += w[x];
                double u = sp_rng_uniform(rng) * rem, c = 0;
                pickj = -1;
                for (int32_t x = 0; x < nt && pickj < 0; x++)
                    if (w[x] > 0 && u < (c += w[x])) pickj = x;
                for (int32_t x = nt - 1; pickj < 0 && x >= 0; x--)
                    if (w[x] > 0) pickj = x;
            }
            const int32_t c = top[pickj];
            if (norep && !greedy) w[pickj] = 0;
            if (tr->tok[c] >= V) continue;
            const int32_t id = t->n_nodes++;
            t->parent[id] = i;
            t->token[id] = tr->tok[c];
            t->depth[id] = t->depth[i] + 1;
            tv[id] = c;
            sc[id] = sc[i] * a * tr->count[c] / tr->kids[v];
            if (t->depth[id] > max_d) max_d = t->depth[id];
        }
    }
    if (src) pthread_mutex_unlock(&s->corpus->mu);
    if (t->n_nodes > 1) note_proposal(s, src, mlen, max_d);
    return SP_OK;
}

void sp_suffix_feedback(sp_suffix *s, int32_t n_accepted) {
    if (!s || s->last_src < 0) return;
    if (n_accepted < 0) { /* not used */
        s->last_src = -1;
        return;
    }
    if (n_accepted > s->last_len) n_accepted = s->last_len;
    const int src = s->last_src, b = s->last_bucket;
    /* per-token acceptance: n_accepted successes out of the tokens that were
     * tested (the first rejected one included) */
    const int32_t tested = n_accepted < s->last_len ? n_accepted + 1 : n_accepted;
    s->acc[src][b] += n_accepted;
    s->tried[src][b] += tested;
    s->st.accepted += n_accepted;
    s->last_src = -1;
}

void sp_suffix_set_whole_text(sp_suffix *s, bool whole) {
    if (s) s->whole_text = whole;
}

/* llama.cpp's lookup thresholds (common/ngram-cache.cpp), by n-gram size 1..4:
 * the context cache uses the lax ones, the dynamic cache the strict ones. */
static const int LOOKUP_MIN_SAMPLES[2][4] = {{2, 2, 1, 1}, {4, 3, 2, 2}};
static const int LOOKUP_MIN_PERCENT[2][4] = {{66, 50, 50, 50}, {75, 66, 66, 66}};

/* The most frequent continuation of the longest n-gram (ngram_max down to
 * ngram_min) ending seq[len) that passes the thresholds, or -1. */
static int32_t lookup_one(const trie *t, const int32_t *seq, int32_t len, int32_t ngram_min,
                          int32_t ngram_max, int strict) {
    for (int32_t g = ngram_max; g >= ngram_min; g--) {
        if (g > len) continue;
        const int32_t v = trie_walk(t, seq + len - g, g);
        if (v < 0 || t->kids[v] == 0) continue;
        const int32_t c = t->best[v];
        if (t->kids[v] < LOOKUP_MIN_SAMPLES[strict][g - 1]) continue;
        if (100 * (int64_t)t->count[c] < (int64_t)LOOKUP_MIN_PERCENT[strict][g - 1] * t->kids[v]) continue;
        return t->tok[c];
    }
    return -1;
}

sp_status sp_suffix_propose_lookup(sp_suffix *s, const int32_t *hist, int32_t n, int32_t max_len,
                                   int32_t ngram_min, int32_t ngram_max, int32_t *out,
                                   int32_t *n_out, sp_error *err) {
    if (!s || !n_out || (n > 0 && !hist) || (max_len > 0 && !out) || n < 0 || max_len < 0 ||
        ngram_min < 1 || ngram_max > 4 || ngram_min > ngram_max)
        return sp_fail(err, SP_ERR_ARG, "suffix lookup: bad arguments");
    *n_out = 0;
    s->last_src = -1;
    const double t0 = sp_now();
    sp_status st = index_text(s, hist, n, err);
    if (!st && n > 0 && max_len > 0) {
        if (max_len > MAX_CHAIN) max_len = MAX_CHAIN;
        int32_t seq[4 + MAX_CHAIN], len = n < 4 ? n : 4, k = 0;
        memcpy(seq, hist + n - len, sizeof(int32_t) * (size_t)len);
        const bool req_ok = s->n_text == n;
        while (k < max_len) {
            int32_t tok = req_ok ? lookup_one(&s->req, seq, len, ngram_min, ngram_max, 0) : -1;
            if (tok < 0) {
                pthread_mutex_lock(&s->corpus->mu);
                tok = lookup_one(&s->corpus->t, seq, len, ngram_min, ngram_max, 1);
                pthread_mutex_unlock(&s->corpus->mu);
            }
            if (tok < 0) break;
            out[k++] = tok;
            seq[len++] = tok;
        }
        *n_out = k;
        if (k > 0) {
            s->st.proposals++;
            s->st.proposed += k;
        }
    }
    note_time(s, sp_now() - t0);
    return st;
}

double sp_suffix_last_expect(const sp_suffix *s) { return s && s->last_src >= 0 ? s->last_expect : 0; }

sp_suffix_stats sp_suffix_get_stats(sp_suffix *s) {
    sp_suffix_stats r = sp_suffix_corpus_stats(s ? s->corpus : NULL);
    if (!s) return r;
    r.request_nodes = s->req.n;
    r.bytes += trie_bytes(&s->req) + (int64_t)s->max_req * 4;
    r.proposals = s->st.proposals;
    r.proposed = s->st.proposed;
    r.accepted = s->st.accepted;
    r.from_corpus = s->st.from_corpus;
    r.steps = s->st.steps;
    r.seconds = s->st.seconds;
    r.max_step_seconds = s->st.max_step_seconds;
    return r;
}
