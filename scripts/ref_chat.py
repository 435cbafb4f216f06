#!/usr/bin/env python3
"""ref_chat: llama.cpp's rendering of chat conversations, the reference side
of tests/test_chat.c's Qwen3.5 vectors. Not part of Specula's build.

    scripts/ref_chat.py URL IN.json OUT.json

IN.json is a list of conversations ({"messages": [...]}); for each, OUT.json
gets {"messages", "thinking": true|false, "prompt"} twice: the prompt a
running llama-server (jinja on, its default) returns from /apply-template,
once as it is (thinking on) and once with chat_template_kwargs
{"enable_thinking": false}. tests/data/qwen35/chat.json was made with
llama.cpp de3ff81:
    llama-server -m ANY.gguf --chat-template-file models/templates/Qwen3.5-4B.jinja --port 18731 &
    scripts/ref_chat.py http://127.0.0.1:18731 tests/data/qwen35/chat_in.json tests/data/qwen35/chat.json
"""
import json
import sys
import urllib.request


def apply(url, body):
    req = urllib.request.Request(url + "/apply-template", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["prompt"]


def main():
    url, src, dst = sys.argv[1:4]
    out = []
    for conv in json.load(open(src, encoding="utf-8")):
        for thinking in (True, False):
            body = {"messages": conv["messages"]}
            if not thinking:
                body["chat_template_kwargs"] = {"enable_thinking": False}
            out.append({"messages": conv["messages"], "thinking": thinking, "prompt": apply(url, body)})
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
