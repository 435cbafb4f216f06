/* spec_config.h: the settings' checks and derived sizes the loop and the
 * tests use beyond sp_spec.h's (internal). */
#ifndef SP_SPEC_CONFIG_H
#define SP_SPEC_CONFIG_H

#include <stdint.h>

#include "sp_spec.h"

/* Checks that need no model: value ranges and the drafter/verifier/tree
 * combinations, for parameters however they were built. */
sp_status sp_spec_config_check_params(const sp_spec_params *p, sp_error *err);
/* The drafted-token budget per iteration: gamma, or the tree's drafted
 * nodes; 0 for plain decoding. */
int32_t sp_spec_config_budget(const sp_spec_params *p);
/* Parse a weight type name for the low-bit self-draft: any ggml type name,
 * case-insensitive, of a type the engine computes with. SP_ERR_ARG (with
 * the accepted names) otherwise. */
sp_status sp_spec_lowbit_parse(const char *name, sp_ggml_type *out, sp_error *err);

#endif
