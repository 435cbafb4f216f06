// ref_ngram_map: the llama.cpp side of tests/test_ngram_map.c. Runs
// llama.cpp's own n-gram map (common/ngram-map.h: begin, draft, accept) over
// token streams it makes up, and prints every draft, so Specula's
// src/speculation/ngram_map.c can be held against it token for token.
// Built by scripts/ref_ngram_map.sh against a llama.cpp build; not part of
// Specula's build.
//
// A stream: tokens over a small alphabet, mixing fresh random tokens with
// copies (sometimes altered) of earlier stretches, so keys recur with one or
// several continuations. Two requests per case: the second's prompt is the
// first's text cut short plus new tokens (begin's clean-up path).
// Each request: begin(prompt); then at position p (p from the prompt's end)
// draft(h[0..p), h[p]), accept(tokens of the draft equal to h[p+1..]) and
// advance p by 1 + that count, as a speculative loop does.
//
// usage: ref_ngram_map SEED [mod] > FILE
// Output (text): "case N M KEY_ONLY MIN_HITS" (mod: "case N_MATCH N_MIN
// N_MAX", llama.cpp's ngram-mod drafter instead), then per request
// "request PROMPT_LEN LEN", "tokens t0 t1 ...", one "draft P K d0 .. dK-1"
// per call, "end".
#include "ngram-map.h"
#include "speculative.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static unsigned long long rng_state;
static unsigned rnd(unsigned n) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)((rng_state >> 33) % n);
}

static std::vector<llama_token> make_stream(size_t len, unsigned alphabet, unsigned max_span = 60) {
    std::vector<llama_token> t;
    while (t.size() < len) {
        if (t.size() < 20 || rnd(3) == 0) {
            size_t k = 1 + rnd(6);
            for (size_t i = 0; i < k; i++) t.push_back((llama_token)rnd(alphabet));
        } else {
            size_t span = 5 + rnd(max_span);
            if (span > t.size()) span = t.size();
            size_t from = rnd((unsigned)(t.size() - span + 1));
            for (size_t i = 0; i < span; i++) {
                llama_token x = t[from + i];
                if (rnd(40) == 0) x = (llama_token)rnd(alphabet);
                t.push_back(x);
            }
        }
    }
    t.resize(len);
    return t;
}

static void run_request(common_ngram_map &map, const std::vector<llama_token> &t, size_t prompt) {
    std::printf("request %zu %zu\ntokens", prompt, t.size());
    for (llama_token x : t) std::printf(" %d", x);
    std::printf("\n");
    llama_tokens h(t.begin(), t.begin() + (long)prompt);
    common_ngram_map_begin(map, h);
    size_t p = prompt;
    while (p + 1 < t.size()) {
        llama_tokens inp(t.begin(), t.begin() + (long)p);
        llama_tokens draft;
        common_ngram_map_draft(map, inp, t[p], draft);
        std::printf("draft %zu %zu", p, draft.size());
        size_t acc = 0;
        while (acc < draft.size() && p + 1 + acc < t.size() && draft[acc] == t[p + 1 + acc]) acc++;
        for (llama_token x : draft) std::printf(" %d", x);
        std::printf("\n");
        common_ngram_map_accept(map, (uint16_t)acc);
        p += 1 + acc;
    }
}

// ngram-mod through llama.cpp's speculative pipeline (common_speculative_*,
// the one llama-server drives: begin, draft with its chaining, accept).
static void run_mod_request(common_speculative *spec, const std::vector<llama_token> &t, size_t prompt) {
    std::printf("request %zu %zu\ntokens", prompt, t.size());
    for (llama_token x : t) std::printf(" %d", x);
    std::printf("\n");
    llama_tokens h(t.begin(), t.begin() + (long)prompt);
    common_speculative_begin(spec, 0, h);
    size_t p = prompt;
    while (p + 1 < t.size()) {
        llama_tokens inp(t.begin(), t.begin() + (long)p);
        llama_tokens draft;
        common_speculative_draft_params &dp = common_speculative_get_draft_params(spec, 0);
        dp.drafting = true;
        dp.n_max = -1;
        dp.id_last = t[p];
        dp.prompt = &inp;
        dp.result = &draft;
        common_speculative_draft(spec);
        std::printf("draft %zu %zu", p, draft.size());
        size_t acc = 0;
        while (acc < draft.size() && p + 1 + acc < t.size() && draft[acc] == t[p + 1 + acc]) acc++;
        for (llama_token x : draft) std::printf(" %d", x);
        std::printf("\n");
        common_speculative_accept(spec, 0, (uint16_t)acc);
        p += 1 + acc;
    }
}

static int main_mod() {
    struct { int n_match, n_min, n_max; unsigned alphabet, max_span; size_t len; } cases[] = {
        {24, 48, 64, 40, 400, 3000}, // llama.cpp's defaults
        {4, 2, 16, 12, 60, 1500},    // short keys: wrong drafts, low-acceptance resets
        {8, 0, 32, 20, 120, 1500},
    };
    for (auto &c : cases) {
        common_params_speculative sp;
        sp.types = {COMMON_SPECULATIVE_TYPE_NGRAM_MOD};
        sp.ngram_mod.n_match = c.n_match;
        sp.ngram_mod.n_min = c.n_min;
        sp.ngram_mod.n_max = c.n_max;
        common_speculative *spec = common_speculative_init(sp, 1);
        std::printf("case %d %d %d\n", c.n_match, c.n_min, c.n_max);
        std::vector<llama_token> a = make_stream(c.len, c.alphabet, c.max_span);
        run_mod_request(spec, a, c.len / 3);
        std::vector<llama_token> b(a.begin(), a.begin() + (long)(c.len * 3 / 5));
        std::vector<llama_token> more = make_stream(c.len / 2, c.alphabet, c.max_span);
        b.insert(b.end(), more.begin(), more.end());
        run_mod_request(spec, b, c.len * 3 / 5 + 10);
        common_speculative_free(spec);
    }
    std::printf("end\n");
    return 0;
}

int main(int argc, char **argv) {
    rng_state = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
    if (argc > 2 && std::string(argv[2]) == "mod") return main_mod();
    struct { int n, m; bool key_only; int min_hits; unsigned alphabet; size_t len; } cases[] = {
        {12, 48, true, 1, 40, 1500}, // ngram-map-k with llama.cpp's defaults
        {12, 48, false, 1, 40, 1500}, // ngram-map-k4v, defaults
        {3, 8, false, 2, 12, 1200},  // short keys: several values per key
        {2, 16, true, 1, 8, 1000},
        {4, 6, false, 3, 10, 1000},
    };
    for (auto &c : cases) {
        common_ngram_map map((uint16_t)c.n, (uint16_t)c.m, c.key_only, (uint16_t)c.min_hits);
        std::printf("case %d %d %d %d\n", c.n, c.m, c.key_only ? 1 : 0, c.min_hits);
        std::vector<llama_token> a = make_stream(c.len, c.alphabet);
        run_request(map, a, c.len / 3);
        // second request: the first's text cut at 60%, then new tokens
        std::vector<llama_token> b(a.begin(), a.begin() + (long)(c.len * 3 / 5));
        std::vector<llama_token> more = make_stream(c.len / 2, c.alphabet);
        b.insert(b.end(), more.begin(), more.end());
        run_request(map, b, c.len * 3 / 5 + 10);
    }
    std::printf("end\n");
    return 0;
}
