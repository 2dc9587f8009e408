// hfprobe.js - ask Hugging Face tokenizers (the reference) which code points
// a regex matches: a byte-level tokenizer whose pre-tokenizer removes the
// matches encodes blocks of code points; what decodes back did not match.
'use strict';
const path = require('path');
const nm = path.join(__dirname, '..', '..', 'testdata', 'cache', 'node_modules');
const { Tokenizer } = require(path.join(nm, '@anush008', 'tokenizers'));

exports.UNICODE = '16.0';

function byteChars() {
	const bs = [];
	for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
	for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
	for (let b = 0xae; b <= 0xff; b++) bs.push(b);
	const cs = bs.slice();
	let n = 0;
	for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
	const m = {};
	bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
	return m;
}
exports.byteChars = byteChars;

function probeTokenizer(re) {
	const bc = byteChars();
	const vocab = {};
	for (let b = 0; b < 256; b++) vocab[bc[b]] = b;
	const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
	return Tokenizer.fromString(JSON.stringify({
		version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
		pre_tokenizer: { type: 'Sequence', pretokenizers: [
			{ type: 'Split', pattern: { Regex: re }, behavior: 'Removed', invert: false }, bl] },
		post_processor: null, decoder: bl,
		model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
			end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
	}));
}

// Uint8Array over all code points: 1 where `re` matches the lone code point.
exports.members = async function (re) {
	const fs = require('fs');
	const dir = path.join(nm, '..', 'probe');
	const file = path.join(dir, Buffer.from(re).toString('hex') + '.bin');
	if (fs.existsSync(file))
		return new Uint8Array(fs.readFileSync(file));
	const t = probeTokenizer(re);
	const out = new Uint8Array(0x110000);
	const BLOCK = 65536;
	// The regex matches one code point at a time, so in a block of
	// distinct code points what decodes back is, in order, those it did
	// not match.
	for (let lo = 0; lo < 0x110000; lo += BLOCK) {
		const cps = [];
		for (let cp = lo; cp < lo + BLOCK; cp++)
			if (cp < 0xd800 || cp > 0xdfff) cps.push(cp);
		const e = await t.encode(String.fromCodePoint(...cps), null, { addSpecialTokens: false });
		const rest = Array.from(await t.decode(e.getIds(), false), (c) => c.codePointAt(0));
		let j = 0;
		for (const cp of cps) {
			if (j < rest.length && rest[j] === cp) j++;
			else out[cp] = 1;
		}
		if (j !== rest.length) throw new Error('probe ' + re + ': decoded text out of order');
	}
	fs.mkdirSync(dir, { recursive: true });
	fs.writeFileSync(file, out);
	return out;
};
