// openai-tools.cjs BASE_URL SEEDS - structured output and tool calls of
// ds-serve through the official OpenAI client for Node (npm "openai",
// scripts/fetch-openai.sh), every answer validated by ajv (npm ajv 8.17.1
// with ajv-formats, scripts/ref/fetch-ajv.sh): an independent client and
// an independent validator.  Sampled at temperature 1 over SEEDS seeds,
// several requests at a time (the server batches them).  Every check
// failed is printed; the last line says whether all passed (exit 0).
"use strict";
const path = require("path");
const nm = path.resolve("testdata/cache/node_modules");
const OpenAI = require(path.join(nm, "openai"));
const Ajv2020 = require(path.join(nm, "ajv", "dist", "2020")).default;
const addFormats = require(path.join(nm, "ajv-formats")).default;

let failed = 0, checked = 0;
function check(ok, what, got) {
	checked++;
	if (!ok) {
		failed++;
		console.log("FAIL " + what + ": " + JSON.stringify(got));
	}
}

function validator(schema) {
	const ajv = new Ajv2020({ strict: false, allowUnionTypes: true });
	addFormats(ajv, { mode: "full" });
	return ajv.compile(schema);
}

// JSON text valid under the schema?
function valid(v, text) {
	let doc;
	try {
		doc = JSON.parse(text);
	} catch (e) {
		return "not JSON: " + e.message;
	}
	return v(doc) ? "" : JSON.stringify(v.errors[0]);
}

const person = {
	type: "object",
	properties: {
		name: { type: "string", minLength: 1, maxLength: 24 },
		age: { type: "integer", minimum: 0, maximum: 120 },
		born: { type: "string", format: "date" },
		sisters: { type: "array", items: { enum: ["Jane", "Lydia", "Kitty", "Mary"] },
			   maxItems: 4 },
		letter: { anyOf: [{ type: "null" }, { type: "string", maxLength: 16 }] },
	},
	required: ["name", "age", "sisters"],
	additionalProperties: false,
};

const tools = [
	{ type: "function", function: { name: "get_weather", description: "The weather in a town",
	  parameters: { type: "object", properties: {
		town: { type: "string", minLength: 1, maxLength: 20 },
		unit: { enum: ["celsius", "fahrenheit"] },
		days: { type: "integer", minimum: 1, maximum: 7 } },
	  required: ["town", "unit"] } } },
	{ type: "function", function: { name: "send_letter", description: "Post a letter",
	  parameters: { type: "object", properties: {
		to: { type: "string", maxLength: 24 },
		urgent: { type: "boolean" },
		lines: { type: "array", items: { type: "string", maxLength: 30 }, maxItems: 3 } },
	  required: ["to", "urgent"], additionalProperties: false } } },
];
const toolCheck = Object.fromEntries(tools.map((t) => [t.function.name,
	validator(t.function.parameters)]));

// n requests, `at` of them at a time
async function batch(n, at, f) {
	const out = [];
	for (let i = 0; i < n; i += at) {
		const ps = [];
		for (let k = i; k < Math.min(n, i + at); k++)
			ps.push(f(k));
		out.push(...await Promise.all(ps));
	}
	return out;
}

const user = (s) => [{ role: "user", content: s }];

async function jsonSchema(client, model, seeds) {
	const v = validator(person);
	const texts = await batch(seeds, 4, async (seed) => {
		const c = await client.chat.completions.create({
			model, messages: user("Describe a person of the novel."),
			temperature: 1, seed, max_tokens: 600,
			response_format: { type: "json_schema",
					   json_schema: { name: "person", strict: true, schema: person } } });
		check(c.choices[0].finish_reason === "stop", "json_schema finish", c.choices[0]);
		return c.choices[0].message.content;
	});
	for (const t of texts) {
		const why = valid(v, t);
		check(why === "", "json_schema answer valid under ajv", [t, why]);
	}
	check(new Set(texts).size > seeds / 2, "json_schema answers differ", texts.length);
	// json_object (its strings have no bound: an answer may be cut by
	// max_tokens, then it is a prefix), and /v1/completions with a schema
	const any = validator({ type: "object" });
	const fin = await batch(8, 4, async (seed) => {
		const c = await client.chat.completions.create({
			model, messages: user("Anything."), temperature: 1, seed, max_tokens: 300,
			response_format: { type: "json_object" } });
		const t = c.choices[0].message.content, f = c.choices[0].finish_reason;
		check(f === "length" ? t.startsWith("{") : valid(any, t) === "",
		      "json_object answer an object", c.choices[0]);
		return f;
	});
	console.log("json_object finish reasons: " + fin.join(" "));
	const c = await client.completions.create({ model, prompt: "A person:", temperature: 1,
		seed: 7, max_tokens: 600, response_format: { type: "json_schema",
		json_schema: { name: "p", schema: person } } });
	check(valid(v, c.choices[0].text) === "", "completion under a schema", c.choices[0]);
}

// A forced call: one, of a tool given, arguments valid under its schema.
function checkCall(msg, finish, what, name) {
	check(finish === "tool_calls", what + ": finish_reason", finish);
	const calls = msg.tool_calls || [];
	check(calls.length === 1, what + ": one call", msg);
	for (const c of calls) {
		check(c.type === "function" && typeof c.id === "string" && c.id.length > 0,
		      what + ": call shape", c);
		check(toolCheck[c.function.name] !== undefined &&
		      (!name || c.function.name === name), what + ": tool name", c);
		if (toolCheck[c.function.name])
			check(valid(toolCheck[c.function.name], c.function.arguments) === "",
			      what + ": arguments valid under ajv", c.function);
	}
}

async function required(client, model, seeds) {
	const res = await batch(seeds, 4, async (seed) => {
		const c = await client.chat.completions.create({
			model, messages: user("What is the weather in Bath?"), tools,
			tool_choice: "required", parallel_tool_calls: false,
			temperature: 1, seed, max_tokens: 600 });
		checkCall(c.choices[0].message, c.choices[0].finish_reason, "required");
		return c.choices[0].message.tool_calls ? c.choices[0].message.tool_calls[0] : null;
	});
	const names = new Set(res.filter((c) => c).map((c) => c.function.name));
	check(names.size === 2, "required: both tools called over the seeds", [...names]);
	// a named tool
	await batch(4, 4, async (seed) => {
		const c = await client.chat.completions.create({
			model, messages: user("Write to Jane."), tools, temperature: 1, seed,
			tool_choice: { type: "function", function: { name: "send_letter" } },
			parallel_tool_calls: false, max_tokens: 600 });
		checkCall(c.choices[0].message, c.choices[0].finish_reason, "named",
			  "send_letter");
	});
}

// delta.tool_calls assembled by index equal the whole answer's calls
async function streamed(client, model) {
	for (const seed of [1, 2, 3]) {
		const req = { model, messages: user("Weather?"), tools, tool_choice: "required",
			      parallel_tool_calls: false, temperature: 1, seed, max_tokens: 600 };
		const whole = await client.chat.completions.create(req);
		const calls = [];
		let finish = null, content = "";
		for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
			const d = ch.choices[0] ? ch.choices[0].delta : {};
			content += d.content || "";
			for (const t of d.tool_calls || []) {
				const c = calls[t.index] || (calls[t.index] = { id: "", name: "", arguments: "" });
				c.id += t.id || "";
				c.name += (t.function && t.function.name) || "";
				c.arguments += (t.function && t.function.arguments) || "";
			}
			if (ch.choices[0] && ch.choices[0].finish_reason)
				finish = ch.choices[0].finish_reason;
		}
		const w = whole.choices[0].message.tool_calls || [];
		check(finish === "tool_calls" && content === "", "streamed: finish, no content",
		      [finish, content]);
		check(calls.length === w.length && calls.length === 1 &&
		      calls[0].name === w[0].function.name &&
		      calls[0].arguments === w[0].function.arguments && calls[0].id.length > 0,
		      "streamed calls equal the whole answer's", [calls, w]);
	}
}

// auto on a model that never saw tools: text (it may call; then validly);
// none: text; the calls and results of a conversation rendered back
async function autoAndHistory(client, model) {
	await batch(4, 4, async (seed) => {
		const c = await client.chat.completions.create({
			model, messages: user("Hello."), tools, temperature: 1, seed, max_tokens: 40 });
		const m = c.choices[0].message;
		if (m.tool_calls)
			checkCall(m, c.choices[0].finish_reason, "auto");
		else
			check(typeof m.content === "string" &&
			      ["stop", "length"].includes(c.choices[0].finish_reason), "auto: text", c);
	});
	const none = await client.chat.completions.create({ model, messages: user("Hi."), tools,
		tool_choice: "none", temperature: 0, max_tokens: 20 });
	check(!none.choices[0].message.tool_calls &&
	      typeof none.choices[0].message.content === "string", "none: text", none.choices[0]);
	const first = await client.chat.completions.create({ model, tools, tool_choice: "required",
		messages: user("Weather in Bath?"), temperature: 0, max_tokens: 600,
		parallel_tool_calls: false });
	const call = first.choices[0].message.tool_calls[0];
	const second = await client.chat.completions.create({ model, tools, temperature: 0,
		max_tokens: 20, messages: [...user("Weather in Bath?"), first.choices[0].message,
		{ role: "tool", tool_call_id: call.id, content: "Rain, 9 degrees." }] });
	check(typeof second.choices[0].message.content === "string", "a tool's result answered",
	      second.choices[0]);
}

// refusals: 400 naming the field
async function errors(client, model) {
	const cases = [
		[{ messages: user("x"), tools, tool_choice: { type: "function",
		   function: { name: "fly" } } }, "tool_choice.function.name"],
		[{ messages: user("x"), tools: [{ type: "function", function: { name: "f",
		   parameters: { type: "object", properties: { x: { not: {} } } } } }],
		   tool_choice: "required" }, "tools[0].function.parameters"],
		[{ messages: user("x"), response_format: { type: "json_schema", json_schema: {
		   name: "s", schema: { type: "object", patternProperties: { a: {} } } } } },
		 "response_format.json_schema.schema"],
		[{ messages: [...user("x"), { role: "tool", tool_call_id: "call_none",
		   content: "1" }] }, "messages[1].tool_call_id"],
		[{ messages: user("x"), tools: [tools[0], tools[0]] }, "tools[1].function.name"],
	];
	for (const [body, param] of cases) {
		try {
			await client.chat.completions.create({ model, max_tokens: 4, ...body });
			check(false, "refused: " + param, "accepted");
		} catch (e) {
			check(e instanceof OpenAI.BadRequestError && e.status === 400 &&
			      e.param === param && e.message.includes(param), "400 naming " + param,
			      [e.status, e.param, e.message]);
		}
	}
}

async function main() {
	const [base, seeds] = process.argv.slice(2);
	const client = new OpenAI({ baseURL: base, apiKey: "none", maxRetries: 0 });
	const model = (await client.models.list()).data[0].id;
	await jsonSchema(client, model, +seeds);
	await required(client, model, +seeds);
	await streamed(client, model);
	await autoAndHistory(client, model);
	await errors(client, model);
	console.log(failed ? `openai-tools: ${failed} of ${checked} checks failed` :
		    `openai-tools: all ${checked} checks passed`);
	process.exit(failed ? 1 : 0);
}

main().catch((e) => {
	console.log("openai-tools: " + (e.stack || e));
	process.exit(1);
});
