/* serve_framing: the framing headers of a request, counted and checked
 * (see serve_framing.h). */
#include "serve_framing.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

typedef struct framing {
    int n_cl, n_te;
    bool cl_bad, te_bad;
} framing;

/* v without surrounding spaces and tabs equals word (case-insensitive). */
static bool is_token(const char *v, const char *word) {
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    return n == strlen(word) && !strncasecmp(v, word, n);
}

static enum MHD_Result count(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        f->n_cl++;
        const char *v = value ? value : "";
        while (*v == ' ' || *v == '\t') v++;
        const char *d = v;
        while (*d >= '0' && *d <= '9') d++;
        while (*d == ' ' || *d == '\t') d++;
        if (d == v || *d || d - v > 18) f->cl_bad = true;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->n_te++;
        if (!value || !is_token(value, "chunked")) f->te_bad = true;
    }
    return MHD_YES;
}

const char *serve_framing_error(struct MHD_Connection *c) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count, &f);
    if (f.n_cl > 1) return "the request has more than one Content-Length header";
    if (f.n_te > 1) return "the request has more than one Transfer-Encoding header";
    if (f.n_cl && f.n_te) return "the request has both Content-Length and Transfer-Encoding";
    if (f.cl_bad) return "the request's Content-Length is not a number";
    if (f.te_bad) return "the request's Transfer-Encoding is not 'chunked' (the only coding supported)";
    return NULL;
}
