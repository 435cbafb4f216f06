/* serve_metrics.c: the counters and histograms of `specula serve` and
 * their Prometheus text for GET /metrics (vLLM's names under specula:). */
#include <stdio.h>
#include <stdlib.h>

#include "serve.h"

static const double TTFT_B[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double TPOT_B[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};

void serve_metrics_init(serve_metrics *mt) { pthread_mutex_init(&mt->mu, NULL); }

void serve_metrics_free(serve_metrics *mt) { pthread_mutex_destroy(&mt->mu); }

void serve_metrics_record(serve_metrics *mt, const serve_run *g) {
    pthread_mutex_lock(&mt->mu);
    mt->tok_in += (uint64_t)g->n_prompt;
    mt->tok_cached += (uint64_t)g->n_cached;
    mt->tok_out += (uint64_t)g->n_gen;
    mt->drafts += (uint64_t)(g->sst.iterations - g->sst.gamma_hist[0]);
    mt->draft_tokens += (uint64_t)g->sst.drafted;
    mt->accepted += (uint64_t)g->sst.accepted;
    for (int i = 0; i < SP_SPEC_MAX_GAMMA; i++)
        for (int t = i + 1; t < SP_SPEC_MAX_GAMMA + 2; t++) mt->acc_pos[i] += (uint64_t)g->sst.accept_hist[t];
    if (g->n_gen > 0) {
        double ttft = g->t_first - g->t0;
        int b = 0;
        while (b < SERVE_NB && ttft > TTFT_B[b]) b++;
        mt->ttft[b]++, mt->ttft_sum += ttft, mt->ttft_n++;
    }
    if (g->n_gen > 1) {
        double tpot = (g->t_last - g->t_first) / (g->n_gen - 1);
        int b = 0;
        while (b < SERVE_NB && tpot > TPOT_B[b]) b++;
        mt->tpot[b]++, mt->tpot_sum += tpot, mt->tpot_n++;
    }
    pthread_mutex_unlock(&mt->mu);
}

void serve_metrics_count(serve_metrics *mt, int ep, unsigned status) {
    pthread_mutex_lock(&mt->mu);
    mt->req[ep][status < 600 ? status : 599]++;
    pthread_mutex_unlock(&mt->mu);
}

char *serve_metrics_text(server *S) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
#define OUT(...) (n += (size_t)snprintf(s + n, n < cap ? cap - n : 0, __VA_ARGS__))
    pthread_mutex_lock(&S->met.mu);
    OUT("# HELP specula:requests_total HTTP requests by endpoint and status.\n# TYPE specula:requests_total counter\n");
    for (int e = 0; e < SP_SERVE_EP_N; e++)
        for (int st = 0; st < 600; st++)
            if (S->met.req[e][st]) OUT("specula:requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", SP_SERVE_EP_NAMES[e], st,
                                  (unsigned long long)S->met.req[e][st]);
    OUT("# TYPE specula:prompt_tokens_total counter\nspecula:prompt_tokens_total %llu\n", (unsigned long long)S->met.tok_in);
    OUT("# HELP specula:prompt_tokens_cached_total Prompt tokens taken from a slot's prompt cache (not evaluated).\n"
        "# TYPE specula:prompt_tokens_cached_total counter\nspecula:prompt_tokens_cached_total %llu\n",
        (unsigned long long)S->met.tok_cached);
    OUT("# TYPE specula:generation_tokens_total counter\nspecula:generation_tokens_total %llu\n",
        (unsigned long long)S->met.tok_out);
    OUT("# TYPE specula:spec_decode_num_drafts_total counter\nspecula:spec_decode_num_drafts_total %llu\n",
        (unsigned long long)S->met.drafts);
    OUT("# TYPE specula:spec_decode_num_draft_tokens_total counter\nspecula:spec_decode_num_draft_tokens_total %llu\n",
        (unsigned long long)S->met.draft_tokens);
    OUT("# TYPE specula:spec_decode_num_accepted_tokens_total counter\nspecula:spec_decode_num_accepted_tokens_total %llu\n",
        (unsigned long long)S->met.accepted);
    OUT("# TYPE specula:spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (int i = 0; i < SP_SPEC_MAX_GAMMA; i++)
        if (S->met.acc_pos[i] || i == 0)
            OUT("specula:spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", i,
                (unsigned long long)S->met.acc_pos[i]);
    if (S->online.on) {
        sp_online_stats t = {0};
        for (int i = 0; i < S->parallel; i++)
            for (int d = 0; d < serve_n_learners(S); d++) {
                sp_online_stats o = sp_online_get_stats(S->slots[i].on[d], NULL);
                t.observed += o.observed, t.rounds += o.rounds, t.steps += o.steps;
                t.swaps += o.swaps, t.errors += o.errors, t.t_train += o.t_train;
            }
        OUT("# HELP specula:online_observed_positions_total Target rows the draft learners took in.\n"
            "# TYPE specula:online_observed_positions_total counter\nspecula:online_observed_positions_total %lld\n",
            (long long)t.observed);
        OUT("# TYPE specula:online_rounds_total counter\nspecula:online_rounds_total %lld\n", (long long)t.rounds);
        OUT("# TYPE specula:online_steps_total counter\nspecula:online_steps_total %lld\n", (long long)t.steps);
        OUT("# HELP specula:online_swaps_total Trained drafts swapped into serving.\n"
            "# TYPE specula:online_swaps_total counter\nspecula:online_swaps_total %lld\n", (long long)t.swaps);
        OUT("# TYPE specula:online_errors_total counter\nspecula:online_errors_total %lld\n", (long long)t.errors);
        OUT("# TYPE specula:online_train_seconds_total counter\nspecula:online_train_seconds_total %.3f\n", t.t_train);
    }
    if (S->n_dm > 0) {
        pthread_mutex_lock(&S->rmu);
        OUT("# HELP specula:draft_requests_total Requests drafted by each draft model (-md index).\n"
            "# TYPE specula:draft_requests_total counter\n");
        for (int d = 0; d < S->n_dm; d++)
            OUT("specula:draft_requests_total{draft=\"%d\"} %llu\n", d, (unsigned long long)S->routed[d]);
        OUT("# TYPE specula:route_explored_total counter\nspecula:route_explored_total %llu\n",
            (unsigned long long)S->explored);
        pthread_mutex_unlock(&S->rmu);
    }
    const char *hn[2] = {"specula:time_to_first_token_seconds", "specula:time_per_output_token_seconds"};
    const double *hb[2] = {TTFT_B, TPOT_B};
    const uint64_t *hc[2] = {S->met.ttft, S->met.tpot};
    const double hs[2] = {S->met.ttft_sum, S->met.tpot_sum};
    const uint64_t hnn[2] = {S->met.ttft_n, S->met.tpot_n};
    for (int h = 0; h < 2; h++) {
        OUT("# TYPE %s histogram\n", hn[h]);
        uint64_t cum = 0;
        for (int b = 0; b < SERVE_NB; b++) {
            cum += hc[h][b];
            OUT("%s_bucket{le=\"%g\"} %llu\n", hn[h], hb[h][b], (unsigned long long)cum);
        }
        OUT("%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", hn[h], (unsigned long long)hnn[h], hn[h],
            hs[h], hn[h], (unsigned long long)hnn[h]);
    }
    pthread_mutex_lock(&S->mu);
    int busy = 0;
    for (int i = 0; i < S->parallel; i++) busy += S->slots[i].busy;
    OUT("# TYPE specula:num_requests_running gauge\nspecula:num_requests_running %d\n", busy);
    OUT("# TYPE specula:num_requests_waiting gauge\nspecula:num_requests_waiting %d\n", S->waiting);
    OUT("# HELP specula:lowbit_models Low-bit copies of the model built (one per allowed type asked for).\n"
        "# TYPE specula:lowbit_models gauge\nspecula:lowbit_models %d\n", serve_lowbit_built(S->lowbit));
    pthread_mutex_unlock(&S->mu);
    const sp_batch_stats bs = S->bat ? sp_batch_get_stats(S->bat) : (sp_batch_stats){0};
    sp_batch_stats ds = {0};
    for (int d = 0; d < S->n_dm; d++)
        if (S->dbat[d]) {
            const sp_batch_stats x = sp_batch_get_stats(S->dbat[d]);
            ds.passes += x.passes, ds.seqs += x.seqs, ds.tokens += x.tokens;
        }
    OUT("# HELP specula:batch_steps_total Shared forward passes run (continuous batching).\n"
        "# TYPE specula:batch_steps_total counter\nspecula:batch_steps_total %llu\n"
        "# HELP specula:batch_sequences_total Sequences those passes carried (over steps: the mean batch).\n"
        "# TYPE specula:batch_sequences_total counter\nspecula:batch_sequences_total %llu\n"
        "# HELP specula:batch_tokens_total Tokens (rows) those passes evaluated.\n"
        "# TYPE specula:batch_tokens_total counter\nspecula:batch_tokens_total %llu\n"
        "# HELP specula:batch_spec_sequences_total Of the sequences, speculative requests' target forwards.\n"
        "# TYPE specula:batch_spec_sequences_total counter\nspecula:batch_spec_sequences_total %llu\n"
        "# HELP specula:batch_spec_shared_total Of those, the ones that shared their pass with another sequence.\n"
        "# TYPE specula:batch_spec_shared_total counter\nspecula:batch_spec_shared_total %llu\n"
        "# HELP specula:batch_spec_tokens_total Of the tokens, speculative requests' (drafted tokens verified included).\n"
        "# TYPE specula:batch_spec_tokens_total counter\nspecula:batch_spec_tokens_total %llu\n"
        "# HELP specula:batch_pass_fixed_seconds Fitted pass time a + b R: the fixed part a (0 before a fit).\n"
        "# TYPE specula:batch_pass_fixed_seconds gauge\nspecula:batch_pass_fixed_seconds %.6g\n"
        "# HELP specula:batch_pass_row_seconds Fitted pass time a + b R: the per-row part b, the marginal cost of a drafted token.\n"
        "# TYPE specula:batch_pass_row_seconds gauge\nspecula:batch_pass_row_seconds %.6g\n",
        (unsigned long long)bs.passes, (unsigned long long)bs.seqs, (unsigned long long)bs.tokens,
        (unsigned long long)bs.spec_seqs, (unsigned long long)bs.spec_shared, (unsigned long long)bs.spec_tokens,
        bs.fit_a, bs.fit_b);
    OUT("# HELP specula:batch_draft_steps_total Shared forward passes of the draft models (batched drafts).\n"
        "# TYPE specula:batch_draft_steps_total counter\nspecula:batch_draft_steps_total %llu\n"
        "# HELP specula:batch_draft_sequences_total Sequences those passes carried.\n"
        "# TYPE specula:batch_draft_sequences_total counter\nspecula:batch_draft_sequences_total %llu\n"
        "# TYPE specula:batch_draft_tokens_total counter\nspecula:batch_draft_tokens_total %llu\n",
        (unsigned long long)ds.passes, (unsigned long long)ds.seqs, (unsigned long long)ds.tokens);
    pthread_mutex_unlock(&S->met.mu);
#undef OUT
    if (n >= cap) {
        free(s);
        return NULL;
    }
    return s;
}
