/* Fuzz target: the speculation-config layer, from key=value text and from
 * JSON (the server's per-request `speculative` object). The first byte picks
 * the form; a configuration that parses is finished and checked. */
#include "fuzz_util.h"
#include "specula.h"
#include "sp_spec.h"
#include "spec_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    sp_spec_config c;
    sp_spec_config_init(&c, NULL);
    sp_error err = {0};
    sp_status st;
    if (data[0] & 1) {
        st = sp_spec_config_json_text(&c, (const char *)data + 1, size - 1, &err);
    } else {
        char *text = malloc(size);
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        st = sp_spec_config_parse(&c, text, &err);
        free(text);
    }
    if (st == SP_OK && sp_spec_config_finish(&c, data[0] & 2, &err) == SP_OK) {
        if (sp_spec_config_check_params(&c.params, &err) != SP_OK) abort(); /* finish promised valid */
        (void)sp_spec_config_batch(&c.params);
        (void)sp_spec_config_extra_ctx(&c.params);
    }
    return 0;
}
