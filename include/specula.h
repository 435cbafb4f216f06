/* specula.h: the public API of the Specula speculative-decoding engine.
 * Include this one header; each module's header documents its part:
 *   load a model (sp_model.h: GGUF or llama2.c, contexts, forward passes),
 *   tokenize (sp_tokenizer.h), sample (sp_sampler.h), generate plainly
 *   (sp_generate.h) or speculatively with a configuration (sp_spec.h,
 *   sp_spec_config.h, drafter kinds in sp_draft.h, EAGLE-3 heads in
 *   sp_eagle3.h, tree shapes in sp_tree.h),
 *   verify distributions directly (sp_verify.h), read statistics, route
 *   requests among drafts (sp_router.h), render chat prompts (sp_chat.h),
 *   train drafts (losses sp_loss.h, the trainer sp_train.h, distillation
 *   sp_distill.h, online learning while serving sp_online.h), plus the
 *   small utilities they use (status, files, GGUF reading, random numbers,
 *   UTF-8, clock, the worker pool).
 * Developer tooling used by the CLI (random models, the verifier simulator,
 * machine facts for benchmarks) is in include/dev/ and not part of this
 * API; the rest is internal (src/). */
#ifndef SPECULA_H
#define SPECULA_H

#include "sp_status.h"
#include "sp_clock.h"
#include "sp_file.h"
#include "sp_utf8.h"
#include "sp_rng.h"
#include "sp_gguf.h"
#include "sp_tokenizer.h"
#include "sp_sampler.h"
#include "sp_threadpool.h"
#include "sp_model.h"
#include "sp_generate.h"
#include "sp_batch.h"
#include "sp_eagle3.h"
#include "sp_tree.h"
#include "sp_verify.h"
#include "sp_draft.h"
#include "sp_spec.h"
#include "sp_spec_config.h"
#include "sp_chat.h"
#include "sp_router.h"
#include "sp_loss.h"
#include "sp_train.h"
#include "sp_distill.h"
#include "sp_online.h"

#endif
