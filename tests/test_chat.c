/* Chat templates: recognition from template texts of each family (excerpts
 * of the Jinja templates the models ship) and the rendered prompt of a
 * system + user + assistant + user conversation, written out by hand from
 * each family's documented format. Qwen3.5 is held to llama.cpp's own
 * rendering: tests/data/qwen35/chat.json, seven conversations (trimming,
 * reasoning in earlier answers, no system message, several turns) each with
 * thinking on and off, as llama.cpp de3ff81's llama-server /apply-template
 * returned them for the Qwen3.5 Jinja template (scripts/ref_chat.py). */
#include "testutil.h"

#include <jansson.h>
#include <stdlib.h>

#include "sp_tokenizer.h"

static const sp_chat_msg CONV[] = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Tell a story."}};

static void expect(sp_chat_tmpl t, const sp_chat_msg *m, int n, const char *want) {
    char *out = NULL;
    sp_error e = {0};
    if (sp_chat_render(t, m, n, &out, &e)) fail_msg("%s: %s", sp_chat_name(t), e.msg);
    if (strcmp(out, want)) fail_msg("%s:\ngot  [%s]\nwant [%s]", sp_chat_name(t), out, want);
    free(out);
}

static void test_render(void **state) {
    (void)state;
    expect(SP_CHAT_CHATML, CONV, 4,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nTell a story.<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect(SP_CHAT_LLAMA3, CONV, 4,
           "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nTell a story.<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(SP_CHAT_PHI3, CONV, 4,
           "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
           "<|user|>\nTell a story.<|end|>\n<|assistant|>\n");
    expect(SP_CHAT_GEMMA, CONV, 4,
           "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
           "<start_of_turn>user\nTell a story.<end_of_turn>\n<start_of_turn>model\n");
    expect(SP_CHAT_LLAMA2, CONV, 4,
           "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello.</s><s>[INST] Tell a story. [/INST]");
    expect(SP_CHAT_MISTRAL, CONV, 4, "[INST] Be brief.\n\nHi [/INST] Hello.</s><s>[INST] Tell a story. [/INST]");
    expect(SP_CHAT_MISTRAL, CONV + 1, 1, "[INST] Hi [/INST]");
    /* gpt-oss: the text llama.cpp de3ff81's llama_chat_apply_template("gpt-oss", ...) returns */
    expect(SP_CHAT_HARMONY, CONV, 4,
           "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>Hi<|end|>"
           "<|start|>assistant<|message|>Hello.<|return|><|start|>user<|message|>Tell a story.<|end|>"
           "<|start|>assistant");
    expect(SP_CHAT_HARMONY, CONV + 1, 1, "<|start|>user<|message|>Hi<|end|><|start|>assistant");
    assert_string_equal(sp_chat_end_of_turn(SP_CHAT_HARMONY), "<|return|>");
    expect(SP_CHAT_GEMMA, CONV, 1, "<start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>model\n");
    assert_string_equal(sp_chat_end_of_turn(SP_CHAT_CHATML), "<|im_end|>");
    assert_string_equal(sp_chat_end_of_turn(SP_CHAT_LLAMA3), "<|eot_id|>");
}

static void test_detect_and_errors(void **state) {
    (void)state;
    assert_int_equal(sp_chat_detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'"),
                     SP_CHAT_CHATML);
    assert_int_equal(sp_chat_detect("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"),
                     SP_CHAT_LLAMA3);
    assert_int_equal(sp_chat_detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim }}"),
                     SP_CHAT_GEMMA);
    assert_int_equal(sp_chat_detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>'}}{{'<|assistant|>'}}"),
                     SP_CHAT_PHI3);
    assert_int_equal(sp_chat_detect("{{ bos_token + '[INST] ' + '<<SYS>>\\n' + system + '\\n<</SYS>>' }}"),
                     SP_CHAT_LLAMA2);
    assert_int_equal(sp_chat_detect("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), SP_CHAT_MISTRAL);
    assert_int_equal(sp_chat_detect("{{- \"<|start|>assistant<|channel|>analysis<|message|>\" }}"), SP_CHAT_HARMONY);
    assert_int_equal(sp_chat_by_name("gpt-oss"), SP_CHAT_HARMONY);
    assert_int_equal(sp_chat_detect("{{ message.content }}"), SP_CHAT_NONE);
    assert_int_equal(sp_chat_detect(NULL), SP_CHAT_NONE);
    assert_int_equal(sp_chat_by_name("llama3"), SP_CHAT_LLAMA3);
    assert_int_equal(sp_chat_by_name("jinja"), SP_CHAT_NONE);
    char *out = NULL;
    sp_error e = {0};
    const sp_chat_msg bad_role[] = {{"robot", "x"}};
    assert_int_equal(sp_chat_render(SP_CHAT_CHATML, bad_role, 1, &out, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "role"));
    const sp_chat_msg late_system[] = {{"user", "x"}, {"system", "y"}};
    assert_int_equal(sp_chat_render(SP_CHAT_CHATML, late_system, 2, &out, &e), SP_ERR_ARG);
    assert_int_equal(sp_chat_render(SP_CHAT_CHATML, CONV, 0, &out, &e), SP_ERR_ARG);
    assert_int_equal(sp_chat_render(SP_CHAT_NONE, CONV, 1, &out, &e), SP_ERR_ARG);
    assert_null(out);
}

static void test_qwen35_llamacpp(void **state) {
    (void)state;
    json_error_t je;
    json_t *all = json_load_file("tests/data/qwen35/chat.json", 0, &je);
    if (!all) fail_msg("tests/data/qwen35/chat.json: %s", je.text);
    size_t i, checked = 0, thinking = 0;
    json_t *v;
    json_array_foreach(all, i, v) {
        json_t *ms = json_object_get(v, "messages");
        sp_chat_msg m[16];
        assert_true(json_array_size(ms) <= 16);
        for (size_t k = 0; k < json_array_size(ms); k++) {
            json_t *e = json_array_get(ms, k);
            m[k].role = json_string_value(json_object_get(e, "role"));
            m[k].content = json_string_value(json_object_get(e, "content"));
        }
        const bool think = json_is_true(json_object_get(v, "thinking"));
        expect(think ? SP_CHAT_QWEN35 : SP_CHAT_QWEN35_NOTHINK, m, (int)json_array_size(ms),
               json_string_value(json_object_get(v, "prompt")));
        checked++;
        thinking += think;
    }
    assert_int_equal(checked, 14);
    assert_int_equal(thinking, 7);
    json_decref(all);
    /* an answer after the last user message keeps its reasoning in a think
     * block (llama-server renders a trailing assistant message so when it
     * continues it: "<|im_start|>assistant\n<think>\n\n</think>\n\nans") */
    const sp_chat_msg tail[] = {{"user", "q"}, {"assistant", " <think>\nplan\n</think>\n\nans "}};
    expect(SP_CHAT_QWEN35, tail, 2,
           "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nans<|im_end|>\n"
           "<|im_start|>assistant\n<think>\n");
    /* the template itself is needed: a system message alone is refused */
    char *out = NULL;
    sp_error e = {0};
    assert_int_equal(sp_chat_render(SP_CHAT_QWEN35, CONV, 1, &out, &e), SP_ERR_ARG);
    assert_non_null(strstr(e.msg, "user message"));
    assert_null(out);
    /* recognised by its reasoning and XML tool calls; Qwen3's (no <function=) stays chatml */
    assert_int_equal(sp_chat_detect("{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + "
                                    "'\\n</think>\\n\\n' + content }}{{- '<tool_call>\\n<function=' + "
                                    "tool_call.name + '>\\n' }}"),
                     SP_CHAT_QWEN35);
    assert_int_equal(sp_chat_detect("{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content + "
                                    "'\\n</think>\\n\\n' + content }}{{- '<tool_call>\\n{\"name\": \"' }}"),
                     SP_CHAT_CHATML);
    assert_int_equal(sp_chat_by_name("qwen3.5-nothink"), SP_CHAT_QWEN35_NOTHINK);
    assert_string_equal(sp_chat_end_of_turn(SP_CHAT_QWEN35), "<|im_end|>");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_render),
    cmocka_unit_test(test_detect_and_errors),
    cmocka_unit_test(test_qwen35_llamacpp),
};
SP_TEST_MAIN(tests)
