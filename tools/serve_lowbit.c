/* serve_lowbit: one shared re-quantised copy of the target per allowed
 * type, built on first use (see serve_lowbit.h). */
#include "serve_lowbit.h"
#include "requant.h"
#include "spec_config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct serve_lowbit {
    const sp_model *target;
    uint64_t mask;
    pthread_mutex_t mu;
    sp_model *copy[SP_GGML_TYPE_COUNT]; /* under mu */
};

sp_status serve_lowbit_parse(const char *list, uint64_t *mask, sp_error *err) {
    *mask = 0;
    if (!strcmp(list, "none")) return SP_OK;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        const size_t n = end ? (size_t)(end - p) : strlen(p);
        char name[32];
        if (n == 0 || n >= sizeof name)
            return sp_fail(err, SP_ERR_ARG, "--lowbit-types: expected weight type names separated by commas "
                           "(or none), got '%s'", list);
        memcpy(name, p, n);
        name[n] = 0;
        sp_ggml_type t;
        sp_error e = {0};
        if (sp_spec_lowbit_parse(name, &t, &e)) return sp_fail(err, SP_ERR_ARG, "--lowbit-types: %s", e.msg);
        *mask |= 1ull << t;
        if (!end) return SP_OK;
        p = end + 1;
    }
}

sp_status serve_lowbit_init(const sp_model *target, uint64_t mask, serve_lowbit **out, sp_error *err) {
    serve_lowbit *lb = calloc(1, sizeof *lb);
    if (!lb) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    lb->target = target;
    lb->mask = mask;
    pthread_mutex_init(&lb->mu, NULL);
    *out = lb;
    return SP_OK;
}

sp_status serve_lowbit_get(serve_lowbit *lb, sp_ggml_type t, const sp_model **out, sp_error *err) {
    *out = NULL;
    if ((unsigned)t >= SP_GGML_TYPE_COUNT || !(lb->mask >> t & 1))
        return sp_fail(err, SP_ERR_ARG, "lowbit: %s is not a type this server allows (--lowbit-types)",
                       sp_ggml_type_name(t));
    pthread_mutex_lock(&lb->mu);
    sp_status st = SP_OK;
    if (!lb->copy[t]) st = sp_model_requantize(lb->target, t, &lb->copy[t], err);
    *out = lb->copy[t];
    pthread_mutex_unlock(&lb->mu);
    return st;
}

int serve_lowbit_built(serve_lowbit *lb) {
    pthread_mutex_lock(&lb->mu);
    int n = 0;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++) n += lb->copy[t] != NULL;
    pthread_mutex_unlock(&lb->mu);
    return n;
}

void serve_lowbit_free(serve_lowbit *lb) {
    if (!lb) return;
    for (int t = 0; t < SP_GGML_TYPE_COUNT; t++) sp_model_free(lb->copy[t]);
    pthread_mutex_destroy(&lb->mu);
    free(lb);
}
