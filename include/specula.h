/* specula.h: the public API of the Specula speculative-decoding engine.
 * Include this one header; each header below documents its part:
 *   sp_status.h     status codes, one-line errors, tensor types
 *   sp_model.h      load a model (GGUF or llama2.c), contexts, forward
 *                   passes, hidden-state taps, EAGLE-3 draft heads
 *   sp_tokenizer.h  text <-> token ids, chat templates
 *   sp_sampler.h    logits -> the adjusted distribution, draws
 *   sp_generate.h   plain generation and prefill
 *   sp_spec.h       speculative generation: the loop, its settings, the
 *                   drafters, tree shapes, verifier names, the suffix
 *                   corpus, the router
 *   sp_train.h      losses, the trainer of small drafts, distillation,
 *                   online learning while serving
 * Developer tooling used by the CLI (random models, the verifier simulator,
 * machine facts for benchmarks) is in include/dev/ and not part of this
 * API; the rest is internal (src/, docs/DESIGN.md). */
#ifndef SPECULA_H
#define SPECULA_H

#include "sp_status.h"
#include "sp_tokenizer.h"
#include "sp_sampler.h"
#include "sp_model.h"
#include "sp_generate.h"
#include "sp_batch.h"
#include "sp_spec.h"
#include "sp_train.h"

#endif
