/* serve_lowbit.h: the low-bit self-draft copies of `specula serve`: the
 * weight types the operator allows (--lowbit-types), and at most one
 * re-quantised copy of the target per allowed type, built when a request
 * first asks for it and shared by every slot (sp_drafter_params.lowbit_model),
 * so no request can make the server allocate a model-sized copy per slot
 * or of a type nobody allowed. */
#ifndef SP_SERVE_LOWBIT_H
#define SP_SERVE_LOWBIT_H

#include <stdbool.h>
#include <stdint.h>

#include "specula.h"

#define SP_SERVE_LOWBIT_DEFAULT "q4_0,q8_0"

typedef struct serve_lowbit serve_lowbit;

/* Parses the comma-separated type list ("none": no low-bit drafts) into
 * *mask (bit t: type t allowed). SP_ERR_ARG naming the bad item. */
sp_status serve_lowbit_parse(const char *list, uint64_t *mask, sp_error *err);

/* The copies of target for the types in mask (none built yet). */
sp_status serve_lowbit_init(const sp_model *target, uint64_t mask, serve_lowbit **out, sp_error *err);

/* The shared copy of type t, built on first use (under a lock: concurrent
 * first requests wait for one build). SP_ERR_ARG when t is not allowed. */
sp_status serve_lowbit_get(serve_lowbit *lb, sp_ggml_type t, const sp_model **out, sp_error *err);

/* Copies built so far. */
int serve_lowbit_built(serve_lowbit *lb);

void serve_lowbit_free(serve_lowbit *lb);

#endif
