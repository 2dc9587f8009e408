#!/usr/bin/env node
// ajv-check.js - JSON schema verdicts from ajv (draft 2020-12, ajv-formats
// in full mode), for tests/unit/test_gschema.c.  The packages come from
// scripts/ref/fetch-ajv.sh into testdata/cache/node_modules.
//
//   ajv-check.js corpus DIR OUT
//	Every DIR/*.json case {schema, valid: [...], invalid: [...],
//	subset: [...]}: each document as JSON.stringify writes it (compact)
//	and ajv's verdict, written to OUT as
//	[{name, schema, docs: [{text, label, valid}]}].  A label ajv does
//	not agree with (valid or subset documents it rejects, invalid ones it
//	accepts) is an error: the corpus says what ajv decides.
//   ajv-check.js validate IN OUT
//	IN is [{schema, texts: [...]}]; OUT gets, for each schema, [{ok,
//	why}] for each text: it parses as JSON and ajv accepts the value.
'use strict';
const fs = require('fs');
const path = require('path');
const nm = path.join(__dirname, '..', '..', 'testdata', 'cache', 'node_modules');
const Ajv2020 = require(path.join(nm, 'ajv', 'dist', '2020')).default;
const addFormats = require(path.join(nm, 'ajv-formats')).default;

function compile(schema) {
	const ajv = new Ajv2020({ strict: true, strictTypes: false,
		strictTuples: false, strictRequired: false, allowUnionTypes: true,
		allErrors: false });
	addFormats(ajv, { mode: 'full' });
	return ajv.compile(schema);
}

function corpus(dir, out) {
	const res = [];
	let bad = 0;
	for (const f of fs.readdirSync(dir).filter((x) => x.endsWith('.json')).sort()) {
		const c = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
		const validate = compile(c.schema);
		const docs = [];
		for (const label of ['valid', 'invalid', 'subset']) {
			for (const d of c[label] || []) {
				const ok = validate(d);
				if (ok !== (label !== 'invalid')) {
					console.error(`${f}: ${label} document ${JSON.stringify(d)}: ` +
						`ajv says ${ok ? 'valid' : 'invalid'}`);
					bad++;
				}
				docs.push({ text: JSON.stringify(d), label, valid: ok });
			}
		}
		res.push({ name: f, schema: c.schema, docs });
	}
	fs.writeFileSync(out, JSON.stringify(res));
	return bad ? 1 : 0;
}

function validateTexts(validate, texts) {
	return texts.map((t) => {
		let v;
		try {
			v = JSON.parse(t);
		} catch (e) {
			return { ok: false, why: 'not JSON: ' + e.message };
		}
		if (validate(v))
			return { ok: true, why: '' };
		return { ok: false, why: JSON.stringify(validate.errors[0]) };
	});
}

function validateAll(inFile, out) {
	const sets = JSON.parse(fs.readFileSync(inFile, 'utf8'));
	const res = sets.map((s) => validateTexts(compile(s.schema), s.texts));
	fs.writeFileSync(out, JSON.stringify(res));
	return 0;
}

const [cmd, a, b] = process.argv.slice(2);
if (cmd === 'corpus' && b)
	process.exit(corpus(a, b));
if (cmd === 'validate' && b)
	process.exit(validateAll(a, b));
console.error('usage: ajv-check.js corpus DIR OUT | validate IN OUT');
process.exit(2);
