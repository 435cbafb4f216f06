/* cli_stats: one rendering of sp_spec_stats for every front end (generate
 * --json, the bench harness, the server). */
#include "cli.h"

static json_t *hist_json(const int64_t *h, int n) {
    int last = -1;
    for (int i = 0; i < n; i++)
        if (h[i]) last = i;
    json_t *a = json_array();
    for (int i = 0; i <= last; i++) json_array_append_new(a, json_integer(h[i]));
    return a;
}

json_t *cli_kv_json(const sp_ctx *c) {
    return json_pack("{s:s, s:s, s:i, s:I, s:I, s:i, s:I}", "type_k", sp_ggml_type_name(sp_ctx_type_k(c)), "type_v",
                     sp_ggml_type_name(sp_ctx_type_v(c)), "n_ctx", (int)sp_ctx_n_ctx(c), "bytes",
                     (json_int_t)sp_ctx_kv_bytes(c), "bytes_allocated", (json_int_t)sp_ctx_kv_bytes_allocated(c),
                     "max_batch", (int)sp_ctx_max_batch(c), "scratch_bytes", (json_int_t)sp_ctx_scratch_bytes(c));
}

void cli_kv_print(const sp_ctx *c) {
    fprintf(stderr, "[kv] K %s, V %s: %.1f MiB for a full context of %d tokens (allocated as tokens arrive)\n",
            sp_ggml_type_name(sp_ctx_type_k(c)), sp_ggml_type_name(sp_ctx_type_v(c)),
            (double)sp_ctx_kv_bytes(c) / (1 << 20), sp_ctx_n_ctx(c));
    fprintf(stderr, "[scratch] %.1f MiB for batches of up to %d tokens (touched as far as used)\n",
            (double)sp_ctx_scratch_bytes(c) / (1 << 20), sp_ctx_max_batch(c));
}

void cli_ctx_types(const cli_run_opts *r, sp_ctx_params *cp) {
    cp->type_k = r->type_k;
    cp->type_v = r->type_v;
}

json_t *cli_spec_json(const sp_spec_stats *s) {
    json_t *j = json_object();
    json_object_set_new(j, "drafter", json_string(s->drafter));
    json_object_set_new(j, "verifier", json_string(s->verifier));
    json_object_set_new(j, "iterations", json_integer(s->iterations));
    json_object_set_new(j, "drafted", json_integer(s->drafted));
    json_object_set_new(j, "accepted", json_integer(s->accepted));
    json_object_set_new(j, "emitted", json_integer(s->emitted));
    json_object_set_new(j, "acceptance_rate", json_real(sp_spec_acceptance_rate(s)));
    json_object_set_new(j, "block_efficiency", json_real(sp_spec_block_efficiency(s)));
    json_object_set_new(j, "mean_accepted", json_real(sp_spec_mean_accepted(s)));
    json_object_set_new(j, "accept_hist", hist_json(s->accept_hist, SP_SPEC_MAX_GAMMA + 2));
    json_object_set_new(j, "gamma_hist", hist_json(s->gamma_hist, SP_SPEC_MAX_GAMMA + 2));
    json_object_set_new(j, "target_forwards", json_integer(s->target_forwards));
    json_object_set_new(j, "prefill_forwards", json_integer(s->prefill_forwards));
    json_object_set_new(j, "draft_forwards", json_integer(s->draft_forwards));
    json_object_set_new(j, "seconds_draft", json_real(s->t_draft));
    json_object_set_new(j, "seconds_target", json_real(s->t_target));
    json_object_set_new(j, "seconds_verify", json_real(s->t_verify));
    json_object_set_new(j, "seconds_sample", json_real(s->t_sample));
    return j;
}

void cli_spec_print(FILE *f, const sp_spec_stats *s) {
    fprintf(f,
            "[spec %s/%s] iterations %lld, drafted %lld, accepted %lld (rate %.3f), mean accepted "
            "%.2f, block efficiency %.2f, target forwards %lld, draft forwards %lld\n"
            "[spec time] draft %.3f s, target %.3f s, verify %.3f s, sample %.3f s\n",
            s->drafter, s->verifier, (long long)s->iterations, (long long)s->drafted,
            (long long)s->accepted, sp_spec_acceptance_rate(s), sp_spec_mean_accepted(s),
            sp_spec_block_efficiency(s), (long long)s->target_forwards,
            (long long)s->draft_forwards, s->t_draft, s->t_target, s->t_verify, s->t_sample);
    fprintf(f, "[spec accepted-length histogram]");
    for (int i = 0; i < SP_SPEC_MAX_GAMMA + 2; i++)
        if (s->accept_hist[i]) fprintf(f, " %d:%lld", i, (long long)s->accept_hist[i]);
    fprintf(f, "\n");
}
