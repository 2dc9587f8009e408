#!/usr/bin/python3
"""render-chat.py - the reference renderings of the chat templates by
Jinja2 itself, configured as transformers' apply_chat_template configures
it (transformers' chat_template_utils: ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols; its tojson filter, its
raise_exception and strftime_now globals; the {% generation %} block of
its AssistantTracker, transparent here).

The same templates, conversations and variables as render-chat.js
(strftime_now formats the pinned time PINNED in UTC), into
testdata/cache/chat/ref-jinja2.json; and the wide set (every template of
@huggingface/ollama-utils, testdata/cache/chat/wide/) into
ref-jinja2-wide.json.  Needs python3-jinja2 (scripts/deps.sh installs it).

Usage: scripts/ref/render-chat.py
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CACHE = os.path.join(ROOT, "testdata", "cache")
PINNED = 1700000000


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: its body, as is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    t = datetime.datetime.fromtimestamp(PINNED, datetime.timezone.utc)
    return t.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def load_dir(d):
    for f in sorted(os.listdir(d)):
        if f.endswith(".json"):
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                yield f[:-5], json.load(fh)


def render_set(env, tdir, out):
    convs = list(load_dir(os.path.join(ROOT, "testdata", "chat")))
    results = []
    for tname, tpl in load_dir(tdir):
        try:
            t, perr = env.from_string(tpl["template"]), None
        except Exception as e:  # noqa: BLE001 - any failure is a result
            t, perr = None, str(e)
        for cname, conv in convs:
            r = {"template": tname, "conversation": cname}
            ctx = dict(tpl["special"], tools=None, documents=None)
            ctx.update({k: v for k, v in conv.items() if k != "description"})
            if perr is not None:
                r.update(ok=False, error=perr)
            else:
                try:
                    r.update(ok=True, text=t.render(**ctx))
                except Exception as e:  # noqa: BLE001
                    r.update(ok=False, error=str(e))
            results.append(r)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"engine": "Jinja2 " + jinja2.__version__, "results": results},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    chat = os.path.join(CACHE, "chat")
    env = environment()
    render_set(env, os.path.join(chat, "templates"), os.path.join(chat, "ref-jinja2.json"))
    render_set(env, os.path.join(chat, "wide"), os.path.join(chat, "ref-jinja2-wide.json"))


main()
