/* loss: distillation losses and cross-entropy with their gradients w.r.t.
 * the draft logits (see sp_train.h). */
#include "sp_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sp_status sp_loss_parse(const char *s, sp_loss *out, sp_error *err) {
    sp_loss l = {.kind = SP_LOSS_FKL, .beta = 0.5};
    if (!s) s = "";
    if (!strcmp(s, "fkl")) l.kind = SP_LOSS_FKL;
    else if (!strcmp(s, "rkl")) l.kind = SP_LOSS_RKL;
    else if (!strcmp(s, "tvd")) l.kind = SP_LOSS_TVD;
    else if (!strcmp(s, "ce")) l.kind = SP_LOSS_CE;
    else if (!strcmp(s, "jsd")) l.kind = SP_LOSS_JSD;
    else if (!strncmp(s, "jsd:", 4)) {
        char *end;
        double b = strtod(s + 4, &end);
        if (end == s + 4 || *end || !(b > 0 && b < 1))
            return sp_fail(err, SP_ERR_ARG, "loss: JSD weight must be a number in (0, 1), got '%s'", s + 4);
        l.kind = SP_LOSS_JSD;
        l.beta = b;
    } else {
        return sp_fail(err, SP_ERR_ARG, "loss: unknown loss '%s' (fkl, rkl, jsd, jsd:BETA, tvd, ce)", s);
    }
    *out = l;
    return SP_OK;
}

const char *sp_loss_format(const sp_loss *l, char *buf, int buf_len) {
    static const char *names[] = {"fkl", "rkl", "jsd", "tvd", "ce"};
    if (l->kind == SP_LOSS_JSD) snprintf(buf, (size_t)buf_len, "jsd:%g", l->beta);
    else snprintf(buf, (size_t)buf_len, "%s", names[l->kind]);
    return buf;
}

/* One bucket's term of a separable divergence between target mass P and
 * draft mass Q (log Q given for precision); *h = Q dTerm/dQ. */
static double term(const sp_loss *l, double P, double Q, double logQ, double *h) {
    switch (l->kind) {
    case SP_LOSS_FKL:
        *h = -P;
        return P > 0 ? P * (log(P) - logQ) : 0.0;
    case SP_LOSS_RKL: {
        double lp = log(P > SP_LOSS_P_FLOOR ? P : SP_LOSS_P_FLOOR);
        double r = logQ - lp;
        *h = Q * (r + 1.0);
        return Q * r;
    }
    case SP_LOSS_JSD: {
        const double b = l->beta, M = b * P + (1 - b) * Q;
        if (!(M > 0)) {
            *h = 0;
            return 0;
        }
        const double lm = log(M);
        double v = (1 - b) * Q * (logQ - lm);
        if (P > 0) v += b * P * (log(P) - lm);
        *h = (1 - b) * Q * (logQ - lm);
        return v;
    }
    case SP_LOSS_TVD:
        *h = Q > P ? 0.5 * Q : Q < P ? -0.5 * Q : 0.0;
        return 0.5 * fabs(P - Q);
    case SP_LOSS_CE:
        break;
    }
    *h = 0;
    return 0;
}

double sp_loss_row(const sp_loss *l, const sp_loss_target *t, const float *z, int32_t V,
                   double *scratch, float *dz) {
    double *q = scratch, *h = scratch + V;
    double mx = z[0];
    for (int32_t i = 1; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += (q[i] = exp((double)z[i] - mx));
    const double lse = mx + log(sum);
    for (int32_t i = 0; i < V; i++) q[i] /= sum;

    if (l->kind == SP_LOSS_CE) {
        if (dz) {
            for (int32_t i = 0; i < V; i++) dz[i] = (float)q[i];
            dz[t->token] -= 1.0f;
        }
        return lse - z[t->token];
    }
    double v = 0, hsum = 0;
    if (t->p) {
        for (int32_t i = 0; i < V; i++) {
            v += term(l, t->p[i], q[i], z[i] - lse, &h[i]);
            hsum += h[i];
        }
    } else {
        /* k kept buckets; h[i] = NAN marks the ids not kept until the end */
        for (int32_t i = 0; i < V; i++) h[i] = NAN;
        for (int32_t j = 0; j < t->k; j++) {
            int32_t i = t->ids[j];
            v += term(l, t->probs[j], q[i], z[i] - lse, &h[i]);
            hsum += h[i];
        }
        double qr = 0;
        int32_t n_rest = 0;
        for (int32_t i = 0; i < V; i++)
            if (isnan(h[i])) qr += q[i], n_rest++;
        double hr = 0;
        /* with every id kept, `rest` is rounding of 1 - sum(probs): no bucket */
        if (n_rest > 0) v += term(l, t->rest, qr, qr > 0 ? log(qr) : -INFINITY, &hr);
        hsum += hr;
        /* the bucket's h spreads over its members in proportion to q */
        for (int32_t i = 0; i < V; i++)
            if (isnan(h[i])) h[i] = qr > 0 ? hr * (q[i] / qr) : 0.0;
    }
    /* through the softmax: dL/dz_m = h_m - q_m sum_i h_i */
    if (dz)
        for (int32_t i = 0; i < V; i++) dz[i] = (float)(h[i] - q[i] * hsum);
    return v;
}

int32_t sp_loss_topk(const float *p, int32_t V, int32_t k, int32_t *ids, float *probs, float *rest) {
    if (k > V) k = V;
    if (k < 0) k = 0;
    int32_t n = 0;
    if (k == 0) {
        *rest = 1.0f;
        return 0;
    }
    /* insertion into a sorted list of k: fine for the small k used here */
    for (int32_t i = 0; i < V; i++) {
        if (n == k && !(p[i] > probs[n - 1])) continue;
        int32_t j = n < k ? n++ : n - 1;
        while (j > 0 && p[i] > probs[j - 1]) {
            probs[j] = probs[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        probs[j] = p[i];
        ids[j] = i;
    }
    double s = 0;
    for (int32_t j = 0; j < n; j++) s += probs[j];
    double r = 1.0 - s;
    *rest = r > 0 ? (float)r : 0.0f;
    return n;
}
