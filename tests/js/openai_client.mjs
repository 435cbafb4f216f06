// Drives `specula serve` with the official openai npm client (run by
// tests/test_serve.c with SPECULA_URL=http://127.0.0.1:PORT/v1): a
// completion, a chat completion, a streamed chat with usage, the
// speculative extension, a second chat turn from the prompt cache, and an
// error case. Exits 1 on the first failure.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.SPECULA_URL, apiKey: "unused", maxRetries: 0 });
function check(cond, what) {
  if (!cond) {
    console.error("openai client: FAILED: " + what);
    process.exit(1);
  }
}

const models = await client.models.list();
check(models.data.length === 1 && typeof models.data[0].id === "string", "models.list");

const c = await client.completions.create({ model: models.data[0].id, prompt: "Once upon a time",
                                            max_tokens: 16, temperature: 0 });
check(typeof c.choices[0].text === "string" && c.choices[0].text.length > 0, "completion text");
check(c.choices[0].finish_reason === "length" && c.usage.completion_tokens === 16, "completion usage");

const spec = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 16,
                                               temperature: 0, speculative: { drafter: "ngram", n_max: 4 } });
check(spec.choices[0].text === c.choices[0].text, "speculative greedy text equals plain");
check(spec.metrics.speculative_decoding.num_draft_tokens > 0, "speculative metrics");

const chat = await client.chat.completions.create({ model: "m", max_tokens: 12, temperature: 0,
  messages: [{ role: "system", content: "You tell stories." }, { role: "user", content: "Once" }] });
check(chat.choices[0].message.role === "assistant" && typeof chat.choices[0].message.content === "string",
      "chat message");

const stream = await client.chat.completions.create({ model: "m", max_tokens: 12, temperature: 0, stream: true,
  stream_options: { include_usage: true },
  messages: [{ role: "system", content: "You tell stories." }, { role: "user", content: "Once" }] });
let text = "", usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.choices.length) {
    text += chunk.choices[0].delta.content ?? "";
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(text === chat.choices[0].message.content, "streamed chat equals the non-streamed one");
check(finish === "length" && usage && usage.completion_tokens === 12, "stream finish and usage");

// the prompt cache: a second turn reuses the first (usage.prompt_tokens_details)
const turn2 = [{ role: "system", content: "You tell stories." }, { role: "user", content: "Once" },
  { role: "assistant", content: chat.choices[0].message.content }, { role: "user", content: "And then?" }];
const warm = await client.chat.completions.create({ model: "m", max_tokens: 12, temperature: 0, messages: turn2 });
const cold = await client.chat.completions.create({ model: "m", max_tokens: 12, temperature: 0, messages: turn2,
                                                    cache_prompt: false });
check(warm.usage.prompt_tokens_details.cached_tokens > 0 && cold.usage.prompt_tokens_details.cached_tokens === 0,
      "prompt cache: cached_tokens");
check(warm.choices[0].message.content === cold.choices[0].message.content, "prompt cache: turn 2 equals a cold run");

try {
  await client.completions.create({ model: "m", prompt: "x", n: 2 });
  check(false, "n = 2 must fail");
} catch (e) {
  check(e instanceof OpenAI.APIError && e.status === 400 && /n: only 1/.test(e.message), "error case: " + e);
}
console.log("openai client: all checks passed");
