#!/usr/bin/env node
// chat-ref.js - the reference for `ds-tok --chat`: what transformers'
// apply_chat_template returns for a checkpoint's own template and
// tokenizer, text (tokenize=False) and ids (tokenize=True).
//
// Each pair of PAIRS below (a tokenizer and the template it ships with)
// becomes a checkpoint-like directory testdata/cache/chat/tok/NAME/:
// tokenizer.json and a tokenizer_config.json holding the template and
// the special tokens the reference renderings were made with.  The text
// of each (template, conversation) is Jinja2's rendering
// (testdata/cache/chat/ref-jinja2.json, scripts/ref/render-chat.py:
// Jinja2 configured as transformers configures it); its ids are that
// text encoded by Hugging Face tokenizers 0.22.2 (the Rust library,
// through @anush008/tokenizers) with add_special_tokens=false, which is
// what apply_chat_template(tokenize=True) does.  Written to
// testdata/cache/chat/ref-ids.json:
//   {"pairs": {NAME: {"template": T}}, "results": [{"pair", "conversation",
//    "ok", "text", "ids"} | {"pair", "conversation", "ok": false, "error"}]}
//
// The real tokenizer.json files come from the @lenml/tokenizer-* packages
// (scripts/ref/fetch-npm.sh); npm carries no R1-distill tokenizer, so
// those two are built: the Qwen and Llama 3 tokenizers with DeepSeek's
// chat tokens as the R1-Distill-Qwen and R1-Distill-Llama checkpoints add
// them (Qwen's 151643-151664 replaced; Llama's BOS, EOS and reserved
// 128011-128015 renamed), with the R1 distills' template.
// Usage: scripts/ref/fetch-npm.sh && scripts/ref/fetch-jinja.sh &&
//        scripts/ref/render-chat.py && scripts/ref/chat-ref.js
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..', '..');
const cache = path.join(root, 'testdata', 'cache');
const { Tokenizer } = require(path.join(cache, 'node_modules', '@anush008', 'tokenizers'));

const BOS = '<｜begin▁of▁sentence｜>', EOS = '<｜end▁of▁sentence｜>';

// name -> [tokenizer (testdata/cache/hf/ or a builder), template
// (testdata/cache/chat/templates/), add_bos_token]
const PAIRS = {
	'deepseek-v3': ['v3', 'deepseek-v3', true],
	'r1-distill-qwen': [r1Qwen, 'deepseek-r1-distill-llama-8b', true],
	'r1-distill-llama': [r1Llama, 'deepseek-r1-distill-llama-8b', true],
	'llama3': ['llama3', 'llama3', true],
	'llama3.1': [llama31, 'llama3.1', true],
	'qwen3': ['qwen3', 'qwen3', false],
	'qwen2.5': ['qwen3', 'qwen2.5-0.5b', false],
};

function readJson(p) {
	return JSON.parse(fs.readFileSync(p, 'utf8'));
}

function added(id, content, special) {
	return { id, content, single_word: false, lstrip: false, rstrip: false,
		normalized: false, special };
}

// R1-Distill-Qwen: Qwen2.5's vocabulary, DeepSeek's tokens at 151643-151664
function r1Qwen() {
	const t = readJson(path.join(cache, 'hf', 'qwen3', 'tokenizer.json'));
	const ds = [[EOS, true], ['<｜User｜>', false], ['<｜Assistant｜>', false], [BOS, true],
		['<|EOT|>', false], ['<think>', false], ['</think>', false]];
	t.added_tokens = t.added_tokens.filter((a) => a.id <= 151664).map((a) => {
		const k = a.id - 151643;
		return k < ds.length ? added(a.id, ds[k][0], ds[k][1]) : a;
	});
	return t;
}

// R1-Distill-Llama: Llama 3.1's vocabulary, DeepSeek's tokens renamed in
function r1Llama() {
	const t = readJson(path.join(cache, 'hf', 'llama3', 'tokenizer.json'));
	const ds = { 128000: [BOS, true], 128001: [EOS, true], 128011: ['<｜User｜>', false],
		128012: ['<｜Assistant｜>', false], 128013: ['<think>', false],
		128014: ['</think>', false], 128015: ['<｜▁pad▁｜>', true] };
	t.added_tokens = t.added_tokens.map((a) => (a.id in ds ? added(a.id, ...ds[a.id]) : a));
	// its post-processor names the old BOS; nothing is added here anyway
	t.post_processor = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false,
		use_regex: true };
	return t;
}

function llama31() {
	return readJson(path.join(cache, 'node_modules', '@lenml', 'tokenizer-llama3_1', 'models',
		'tokenizer.json'));
}

async function main() {
	const out = path.join(cache, 'chat', 'tok');
	const py = readJson(path.join(cache, 'chat', 'ref-jinja2.json')).results;
	const pairs = {}, results = [];
	for (const [name, [tok, tname, addBos]] of Object.entries(PAIRS)) {
		const tpl = readJson(path.join(cache, 'chat', 'templates', tname + '.json'));
		const tj = typeof tok === 'function' ? tok()
			: readJson(path.join(cache, 'hf', tok, 'tokenizer.json'));
		const dir = path.join(out, name);
		fs.mkdirSync(dir, { recursive: true });
		fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tj));
		fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({
			add_bos_token: addBos, add_eos_token: false, ...tpl.special,
			chat_template: tpl.template }, null, 1) + '\n');
		pairs[name] = { template: tname };
		const t = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
		let n = 0;
		for (const r of py.filter((x) => x.template === tname)) {
			const e = { pair: name, conversation: r.conversation, ok: r.ok };
			if (r.ok) {
				e.text = r.text;
				e.ids = (await t.encode(r.text, null, { addSpecialTokens: false })).getIds();
				n++;
			} else {
				e.error = r.error;
			}
			results.push(e);
		}
		if (n === 0)
			throw new Error(name + ': no renderings of ' + tname + ' in ref-jinja2.json');
	}
	fs.writeFileSync(path.join(cache, 'chat', 'ref-ids.json'),
		JSON.stringify({ engine: 'Jinja2 + tokenizers 0.22.2', pairs, results }) + '\n');
	process.stderr.write(`chat-ref: ${Object.keys(pairs).length} pairs, ${results.length} renderings\n`);
}

main().catch((e) => {
	process.stderr.write('chat-ref.js: ' + (e.stack || e) + '\n');
	process.exit(1);
});
