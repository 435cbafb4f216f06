#!/usr/bin/env python3
"""Writes bench/prompts/repeat.jsonl: prompts whose answer repeats the context
(rewrite a code block with one change, continue a list, answer with a quote,
a multi-turn conversation that reuses an earlier answer), built from this
repository's sources and Debian's /usr/share/common-licenses. Each answer is
primed with its first words, so a model that copies can go on copying.
Usage: scripts/repeat_prompts.py [OUT] (run from the repository root)."""
import json
import re
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "bench/prompts/repeat.jsonl"
rng = open("src/base/rng.c").read()
fn = rng[rng.index("static uint64_t splitmix64"):rng.index("static inline uint64_t rotl")].strip()
u64 = rng[rng.index("uint64_t sp_rng_u64"):rng.index("double sp_rng_uniform")].strip()
apache = open("/usr/share/common-licenses/Apache-2.0").read()
terms = re.findall(r'^\s+"([A-Z][A-Za-z ]+)" shall mean', apache, re.M)
gpl = open("/usr/share/common-licenses/GPL-3").read()
pre = gpl[gpl.index("The GNU General Public License is a free"):]
pre = " ".join(pre[:pre.index("\n\n")].split())

prompts = [
    {"domain": "code", "prompt": "Rewrite this C code with splitmix64 renamed to mix64; change "
     "nothing else.\n\n" + fn + "\n\nRewritten:\n\n" + fn.replace("splitmix64", "mix64")[:60]},
    {"domain": "code", "prompt": "Rewrite this C function with the variable t renamed to tmp; "
     "change nothing else.\n\n" + u64 + "\n\nRewritten:\n\n" + u64[:80]},
    {"domain": "list", "prompt": "The terms the Apache License defines:\n" +
     "\n".join("- " + t for t in terms) + "\n\nThe same terms again, in the same order:\n- " +
     terms[0] + "\n- " + terms[1]},
    {"domain": "quote", "prompt": "From the GNU GPL version 3:\n\n" + pre +
     "\n\nQuote its first two sentences exactly.\n\n\"" + pre[:50]},
    {"domain": "chat", "prompt": "User: Tell me a short story about a cat.\nAssistant: Once upon "
     "a time, there was a little cat named Tom. Tom liked to play with his red ball in the "
     "garden. One day, the ball rolled under a big tree. Tom was sad, but his friend the dog "
     "helped him get it back. Tom and the dog played together all day.\nUser: Tell the same "
     "story again, word for word, but the cat is named Kim.\nAssistant: Once upon a time, "
     "there was a little cat named Kim. Kim liked to"},
    {"domain": "chat", "prompt": "User: Tell me the story about the cat again.\nAssistant: Once "
     "upon a time, there was a little cat named Tom. Tom liked to"},
]
with open(out, "w") as f:
    for p in prompts:
        f.write(json.dumps(p) + "\n")
print(out, len(prompts), "prompts")
