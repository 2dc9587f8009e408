#!/usr/bin/env node
// render-chat.js - every real chat template (testdata/cache/chat/templates/,
// scripts/ref/fetch-jinja.sh) rendered with every conversation of
// testdata/chat/ by @huggingface/jinja, into
// testdata/cache/chat/ref-hf.json:
//   {"engine": "@huggingface/jinja 0.5.13", "results": [{"template",
//    "conversation", "ok", "text" | "error"}]}
// The variables are those transformers' apply_chat_template passes:
// messages, tools (null without), documents (null), add_generation_prompt,
// the tokenizer's special tokens, the conversation's extra ones
// (enable_thinking).  strftime_now() formats the pinned time PINNED (UTC),
// as tests/unit/test_jinja.c pins it.
// Usage: scripts/ref/render-chat.js [OUT.json]
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..', '..');
const cache = path.join(root, 'testdata', 'cache');
const PINNED = 1700000000;
// @huggingface/jinja's strftime_now() formats `new Date()` (its own
// global; a context variable cannot replace it): the clock is pinned
// instead, in UTC.
process.env.TZ = 'UTC';
const RealDate = Date;
global.Date = class extends RealDate {
	constructor(...a) {
		super(...(a.length ? a : [PINNED * 1000]));
	}
	static now() {
		return PINNED * 1000;
	}
};
const { Template } = require(path.join(cache, 'node_modules', '@huggingface', 'jinja'));

function loadDir(dir) {
	return fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
		.map((f) => [f.slice(0, -5), JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'))]);
}

function context(tpl, conv) {
	const ctx = { ...tpl.special, tools: null, documents: null };
	for (const [k, v] of Object.entries(conv))
		if (k !== 'description')
			ctx[k] = v;
	return ctx;
}

const out = process.argv[2] || path.join(cache, 'chat', 'ref-hf.json');
const results = [];
for (const [tname, tpl] of loadDir(path.join(cache, 'chat', 'templates'))) {
	let t = null, perr = null;
	try {
		t = new Template(tpl.template);
	} catch (e) {
		perr = String(e.message || e);
	}
	for (const [cname, conv] of loadDir(path.join(root, 'testdata', 'chat'))) {
		const r = { template: tname, conversation: cname };
		if (perr !== null) {
			r.ok = false;
			r.error = perr;
		} else {
			try {
				r.text = t.render(context(tpl, conv));
				r.ok = true;
			} catch (e) {
				r.ok = false;
				r.error = String(e.message || e);
			}
		}
		results.push(r);
	}
}
fs.writeFileSync(out, JSON.stringify({ engine: '@huggingface/jinja 0.5.13', results }, null, 1) + '\n');
