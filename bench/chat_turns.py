#!/usr/bin/env python3
"""chat_turns.py: the multi-turn chat load of bench/chat_turns.sh against one
server. CONVS conversations of TURNS turns run at once (one client thread
each); every turn sends the whole transcript so far (a plain-text
"User:/Assistant:" prompt to /v1/completions, so both servers see the same
tokens from the same file) as a stream at temperature 0 and appends the
reply. Measured per turn: time to first token (first streamed text) and the
prompt tokens (usage). Prints one JSON object: per-turn TTFT lists, prompt
sizes, total generated tokens and wall seconds.

usage: chat_turns.py PORT LABEL [CONVS TURNS MAX_TOKENS CACHE]
CACHE: "default" sends no cache_prompt field, "on"/"off" send true/false."""
import http.client
import json
import sys
import threading
import time

USER_TURNS = [
    "Tell me a short story about a cat who finds a key.",
    "What did the cat do with the key next?",
    "Who else was in the story? Describe them.",
    "Now tell what happened at night.",
    "How did the story end?",
    "Give the story a title and a one-line moral.",
]


def one_turn(port, prompt, max_tokens, cache):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if cache != "default":
        body["cache_prompt"] = cache == "on"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("status %d: %s" % (resp.status, resp.read()[:300]))
    ttft, text, usage = None, [], {}
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices") or []:
            if c.get("text"):
                if ttft is None:
                    ttft = time.monotonic() - t0
                text.append(c["text"])
    conn.close()
    return ttft if ttft is not None else time.monotonic() - t0, "".join(text), usage


def main():
    port, label = int(sys.argv[1]), sys.argv[2]
    convs = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    turns = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    max_tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    cache = sys.argv[6] if len(sys.argv) > 6 else "default"
    ttft = [[None] * convs for _ in range(turns)]
    ptok = [[None] * convs for _ in range(turns)]
    gen = [0]
    errors = []
    lock = threading.Lock()

    def conv(k):
        transcript = "A conversation between a curious user (conversation %d) and a storyteller.\n" % k
        for t in range(turns):
            transcript += "User: %s\nAssistant:" % USER_TURNS[t % len(USER_TURNS)]
            try:
                s, reply, usage = one_turn(port, transcript, max_tokens, cache)
            except Exception as e:  # reported, the conversation stops
                with lock:
                    errors.append("conv %d turn %d: %s" % (k, t + 1, e))
                return
            transcript += reply + "\n"
            with lock:
                ttft[t][k] = s
                ptok[t][k] = usage.get("prompt_tokens")
                gen[0] += usage.get("completion_tokens") or 0

    t0 = time.monotonic()
    th = [threading.Thread(target=conv, args=(k,)) for k in range(convs)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    print(json.dumps({"label": label, "ttft": ttft, "prompt_tokens": ptok, "generated": gen[0],
                      "wall": time.monotonic() - t0, "errors": errors}))


if __name__ == "__main__":
    main()
