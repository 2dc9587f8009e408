#!/usr/bin/python3
"""chat-check.py BIN PAIR - ds-tok --chat against the reference of one
(tokenizer, template) pair of testdata/cache/chat/ref-ids.json
(scripts/ref/chat-ref.js): every conversation of testdata/chat/ sent as
an OpenAI body to `ds-tok -t testdata/cache/chat/tok/PAIR --chat -l`
(ids) and `--render -l` (text), both compared exactly; a conversation
Jinja2 refuses must make ds-tok fail alone (exit 1, one line on stderr).
Prints "PAIR: N renderings and their ids equal, M refused as Jinja2
refuses"; exits 1 on the first difference, showing where.
"""
import json
import os
import subprocess
import sys

PINNED = 1700000000     # as render-chat.py pins strftime_now()


def body(conv):
    """The conversation as a chat request body: messages, tools and the
    generation prompt as fields, the rest (enable_thinking ...) as
    chat_template_kwargs."""
    b = {"messages": conv["messages"],
         "add_generation_prompt": conv.get("add_generation_prompt", False)}
    kw = {k: v for k, v in conv.items()
          if k not in ("description", "messages", "add_generation_prompt", "tools")}
    if "tools" in conv:
        b["tools"] = conv["tools"]
    if kw:
        b["chat_template_kwargs"] = kw
    return json.dumps(b, ensure_ascii=False)


def ds_tok(binp, pair, extra, text):
    cmd = [os.path.join(binp, "ds-tok"), "-t", "testdata/cache/chat/tok/" + pair,
           "--chat", "--now", str(PINNED)] + extra
    return subprocess.run(cmd, input=text.encode(), capture_output=True)


def first_diff(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def main(binp, pair):
    ref = json.load(open("testdata/cache/chat/ref-ids.json"))
    rows = [r for r in ref["results"] if r["pair"] == pair]
    if not rows:
        print("%s: no reference" % pair)
        return 1
    convs = {r["conversation"]: json.load(open("testdata/chat/%s.json" % r["conversation"]))
             for r in rows}
    good = [r for r in rows if r["ok"]]
    lines = "".join(body(convs[r["conversation"]]) + "\n" for r in good)
    for extra, what in (([ "--render", "-l"], "text"), (["-l"], "ids")):
        p = ds_tok(binp, pair, extra, lines)
        if p.returncode != 0:
            print("%s: ds-tok %s exited %d: %s" % (pair, " ".join(extra), p.returncode,
                                                   p.stderr.decode(errors="replace")))
            return 1
        out = p.stdout.decode().split("\n")
        if out[-1] != "" or len(out) - 1 != len(good):
            print("%s: %d lines of %s for %d conversations" % (pair, len(out) - 1, what,
                                                               len(good)))
            return 1
        for r, line in zip(good, out):
            got = json.loads(line) if what == "text" else [int(x) for x in line.split()]
            want = r["text"] if what == "text" else r["ids"]
            if got != want:
                i = first_diff(got, want)
                print("%s / %s: %s differ at %d: ds-tok %r, reference %r" % (
                    pair, r["conversation"], what, i, got[max(0, i - 8):i + 8],
                    want[max(0, i - 8):i + 8]))
                return 1
    refused = [r for r in rows if not r["ok"]]
    for r in refused:
        p = ds_tok(binp, pair, ["--render"], body(convs[r["conversation"]]))
        err = p.stderr.decode(errors="replace")
        if p.returncode != 1 or p.stdout or err.count("\n") != 1:
            print("%s / %s: Jinja2 refuses (%s); ds-tok exited %d, printed %r, said %r" % (
                pair, r["conversation"], r["error"], p.returncode, p.stdout[:80], err))
            return 1
    print("%s: %d renderings and their ids equal, %d refused as Jinja2 refuses" % (
        pair, len(good), len(refused)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
