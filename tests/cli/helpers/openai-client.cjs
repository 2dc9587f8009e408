// openai-client.cjs BASE_URL API_KEY - ds-serve through the official OpenAI
// client for Node (npm "openai", pinned by scripts/fetch-openai.sh into
// testdata/cache/node_modules): models, completions and chat, whole and
// streamed, and the errors it raises.  Every check failed is printed; the
// last line says whether all passed (exit 0) or not (exit 1).
"use strict";
const path = require("path");
const OpenAI = require(path.resolve("testdata/cache/node_modules/openai"));

let failed = 0;
function check(ok, what, got) {
	if (!ok) {
		failed++;
		console.log("FAIL " + what + ": " + JSON.stringify(got));
	}
}

async function collect(stream, pick) {
	let text = "", finish = null, usage = null, n = 0;
	for await (const c of stream) {
		n++;
		if (c.usage)
			usage = c.usage;
		if (c.choices.length === 0)
			continue;
		text += pick(c.choices[0]) || "";
		if (c.choices[0].finish_reason)
			finish = c.choices[0].finish_reason;
	}
	return { text, finish, usage, n };
}

async function completions(client, model) {
	const req = { model, prompt: "Hello", max_tokens: 12, temperature: 0,
		      ignore_eos: true };
	const c = await client.completions.create(req);
	check(c.object === "text_completion", "completion object", c.object);
	check(typeof c.choices[0].text === "string", "completion text", c.choices[0]);
	check(c.choices[0].finish_reason === "length", "completion finish", c.choices[0]);
	check(c.usage.completion_tokens === 12 &&
	      c.usage.total_tokens === c.usage.prompt_tokens + 12, "completion usage", c.usage);
	const s = await collect(await client.completions.create({ ...req, stream: true }),
				(ch) => ch.text);
	check(s.text === c.choices[0].text, "streamed completion text", [s.text, c.choices[0].text]);
	check(s.finish === "length" && s.n >= 2, "streamed completion end", s);
}

async function chat(client, model) {
	const req = { model, messages: [{ role: "system", content: "Be brief." },
					{ role: "user", content: "Hi there" }],
		      max_tokens: 10, temperature: 0, ignore_eos: true };
	const c = await client.chat.completions.create(req);
	check(c.object === "chat.completion", "chat object", c.object);
	check(c.choices[0].message.role === "assistant" &&
	      typeof c.choices[0].message.content === "string", "chat message", c.choices[0]);
	check(c.usage.completion_tokens === 10, "chat usage", c.usage);
	const s = await collect(await client.chat.completions.create({
		...req, stream: true, stream_options: { include_usage: true } }),
				(ch) => ch.delta.content);
	check(s.text === c.choices[0].message.content, "streamed chat text",
	      [s.text, c.choices[0].message.content]);
	check(s.finish === "length", "streamed chat finish", s);
	check(s.usage && s.usage.total_tokens === c.usage.total_tokens, "streamed chat usage", s);
}

async function errors(client, base, model) {
	try {
		await client.completions.create({ model, prompt: "x", temperature: 7 });
		check(false, "temperature 7 accepted", null);
	} catch (e) {
		check(e instanceof OpenAI.BadRequestError && e.status === 400 &&
		      e.param === "temperature", "400 error", [e.constructor.name, e.status, e.param]);
	}
	try {
		const bad = new OpenAI({ baseURL: base, apiKey: "wrong", maxRetries: 0 });
		await bad.models.list();
		check(false, "wrong key accepted", null);
	} catch (e) {
		check(e instanceof OpenAI.AuthenticationError && e.status === 401,
		      "401 error", [e.constructor.name, e.status]);
	}
}

async function main() {
	const [base, key] = process.argv.slice(2);
	const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0,
				    timeout: 30000 });
	const models = await client.models.list();
	check(models.data.length === 1 && models.data[0].object === "model",
	      "models", models.data);
	const model = models.data[0].id;
	await completions(client, model);
	await chat(client, model);
	await errors(client, base, model);
	console.log("openai-client: " + (failed ? failed + " checks failed"
					 : "all checks passed"));
	process.exit(failed ? 1 : 0);
}

main().catch((e) => {
	console.log("openai-client: " + (e.stack || e));
	process.exit(1);
});
