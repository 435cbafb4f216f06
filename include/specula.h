/* specula.h: the public API of the Specula speculative-decoding engine.
 * Include this one header; each module's header documents its part. */
#ifndef SPECULA_H
#define SPECULA_H

#include "sp_status.h"
#include "sp_clock.h"
#include "sp_file.h"
#include "sp_utf8.h"
#include "sp_rng.h"
#include "sp_gguf.h"
#include "sp_quant.h"
#include "sp_tokenizer.h"
#include "sp_sampler.h"
#include "sp_kv.h"
#include "sp_threadpool.h"
#include "sp_model.h"
#include "sp_generate.h"
#include "sp_mkmodel.h"
#include "sp_tree.h"
#include "sp_verify.h"
#include "sp_draft.h"
#include "sp_spec.h"
#include "sp_sysinfo.h"

#endif
