/* Fuzz target: the verifiers on arbitrary rows. Input bytes become a
 * vocabulary size, gamma, draft tokens and float rows (raw, then optionally
 * normalised so that they pass the validator). Every row goes through
 * sp_verify_check_row; whatever it accepts, each verifier must handle
 * without aborting, and its output must be in range. */
#include <math.h>

#include "fuzz_util.h"
#include "specula.h"
#include "rng.h"
#include "verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    const int32_t V = 2 + data[0] % 14, gamma = 1 + data[1] % 4;
    const bool normalise = data[2] & 1;
    const int32_t rows = 2 * gamma + 1;
    size_t need = 3 + (size_t)gamma + (size_t)rows * (size_t)V * 4;
    if (size < need) return 0;
    int32_t draft[4];
    for (int32_t i = 0; i < gamma; i++) draft[i] = data[3 + i] % V;
    float *rowsv = malloc((size_t)rows * (size_t)V * sizeof(float));
    memcpy(rowsv, data + 3 + gamma, (size_t)rows * (size_t)V * 4);
    if (normalise) {
        for (int32_t r = 0; r < rows; r++) {
            double s = 0;
            float *row = rowsv + (size_t)r * V;
            for (int32_t i = 0; i < V; i++) {
                if (!isfinite(row[i])) row[i] = 0;
                row[i] = fabsf(row[i]);
                if (row[i] > 1e30f) row[i] = 1e30f;
                s += row[i];
            }
            for (int32_t i = 0; i < V; i++) row[i] = s > 0 ? (float)(row[i] / s) : (i == 0 ? 1.0f : 0.0f);
        }
    }
    const float *q = rowsv, *p = rowsv + (size_t)gamma * V;
    sp_error err = {0};
    sp_verify_ws *ws = NULL;
    if (sp_verify_ws_init(V, &ws, &err) != SP_OK) abort();
    sp_rng rng;
    sp_rng_seed(&rng, data[2]);
    const sp_verifier kinds[] = {SP_VERIFIER_TOKEN, SP_VERIFIER_BLOCK, SP_VERIFIER_GREEDY, SP_VERIFIER_LENIENT};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sp_verify_result res;
        if (sp_verify_chain(ws, kinds[k], 0.5, gamma, draft, q, p, &rng, &res, &err) == SP_OK) {
            if (res.n_accepted < 0 || res.n_accepted > gamma || res.token < 0 || res.token >= V) abort();
        }
    }
    int32_t index, token;
    if (sp_verify_mc(ws, SP_MC_REPLACE, gamma, draft, q, p, &rng, &index, &token, &err) == SP_OK)
        if (index < -1 || index >= gamma || token < 0 || token >= V) abort();
    if (sp_verify_mc(ws, SP_MC_NOREPLACE, gamma, draft, q, p, &rng, &index, &token, &err) == SP_OK)
        if (index < -1 || index >= gamma || token < 0 || token >= V) abort();
    sp_verify_ws_free(ws);
    free(rowsv);
    return 0;
}
