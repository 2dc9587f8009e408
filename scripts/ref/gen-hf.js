#!/usr/bin/env node
// gen-hf.js - golden ids of the Hugging Face tokenizers, by the reference:
// tokenizers 0.22.2 itself (the Rust library, through the Node binding
// @anush008/tokenizers 0.6.0).  For each tokenizer in testdata/cache/hf/
// (see make-hf.js) and each text of testdata/tok/corpus.jsonl, one line
// {"ids": [...], "decoded": "..."} in testdata/tok/hf-NAME.jsonl: the ids
// of encode(text, add_special_tokens = false) and decode(ids) with special
// tokens kept.  It also reports how often the JavaScript port
// @lenml/tokenizers 3.7.2 (a second opinion only) disagrees on V3.
// Usage: scripts/ref/fetch-npm.sh && scripts/ref/gen-hf.js
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..', '..');
const cache = path.join(root, 'testdata', 'cache');
const { Tokenizer } = require(path.join(cache, 'node_modules', '@anush008', 'tokenizers'));

const NAMES = ['v3', 'v3nospecial', 'v3extra', 'dsllm', 'dscoder', 'llama3', 'qwen3', 'llama2',
	'llama2meta', 'llama2extra'];

async function main() {
	const corpus = fs.readFileSync(path.join(root, 'testdata', 'tok', 'corpus.jsonl'), 'utf8')
		.split('\n').filter((l) => l).map((l) => JSON.parse(l).text);
	for (const name of NAMES) {
		const t = Tokenizer.fromFile(path.join(cache, 'hf', name, 'tokenizer.json'));
		const lines = [];
		let n = 0;
		for (const text of corpus) {
			const ids = (await t.encode(text, null, { addSpecialTokens: false })).getIds();
			const decoded = await t.decode(ids, false);
			lines.push(JSON.stringify({ ids, decoded }));
			n += ids.length;
		}
		fs.writeFileSync(path.join(root, 'testdata', 'tok', `hf-${name}.jsonl`), lines.join('\n') + '\n');
		process.stderr.write(`gen-hf: ${name}: ${corpus.length} texts, ${n} tokens\n`);
	}
	// byte-level decoding of odd byte sequences: V3 ids of single bytes
	// (and a few others) in random order, through the reference decoder
	{
		const t = Tokenizer.fromFile(path.join(cache, 'hf', 'v3', 'tokenizer.json'));
		const bc = require('./hfprobe.js').byteChars();
		const byteIds = [];
		for (let b = 0; b < 256; b++) byteIds.push(t.tokenToId(bc[b]));
		let seed = 1202;
		const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
		const lines = [];
		for (let k = 0; k < 200; k++) {
			const seq = [];
			const len = 1 + rnd(10);
			for (let i = 0; i < len; i++)
				seq.push(rnd(5) < 4 ? byteIds[rnd(256)] : rnd(128815));
			lines.push(JSON.stringify({ decode: seq, decoded: await t.decode(seq, false),
				skipped: await t.decode(seq, true) }));
		}
		fs.writeFileSync(path.join(root, 'testdata', 'tok', 'hf-v3-bytes.jsonl'), lines.join('\n') + '\n');
	}
	// second opinion on V3
	const lenml = require(path.join(cache, 'node_modules', '@lenml', 'tokenizers'));
	const v3 = path.join(cache, 'node_modules', '@lenml', 'tokenizer-deepseek_v3', 'models');
	const js = lenml.TokenizerLoader.fromPreTrained({
		tokenizerJSON: JSON.parse(fs.readFileSync(path.join(v3, 'tokenizer.json'), 'utf8')),
		tokenizerConfig: JSON.parse(fs.readFileSync(path.join(v3, 'tokenizer_config.json'), 'utf8')),
	});
	const ref = fs.readFileSync(path.join(root, 'testdata', 'tok', 'hf-v3.jsonl'), 'utf8')
		.split('\n').filter((l) => l).map((l) => JSON.parse(l).ids);
	let diff = 0;
	corpus.forEach((text, i) => {
		const ids = js.encode(text, { add_special_tokens: false });
		if (JSON.stringify(ids) !== JSON.stringify(ref[i])) diff++;
	});
	process.stderr.write(`gen-hf: @lenml/tokenizers disagrees with the reference on ${diff} of ${corpus.length} V3 texts\n`);
}
main().catch((e) => { process.stderr.write('gen-hf: ' + e.stack + '\n'); process.exit(1); });
