// loadtest-chat.js URL MODE CONVERSATIONS TURNS MAX_TOKENS OUT.json - a
// multi-turn load on ds-serve (scripts/loadtest-chat.sh runs it).
// CONVERSATIONS clients at once, each a conversation of TURNS turns: every
// turn sends the whole conversation so far plus a new user message, greedy,
// streamed, and waits for the answer, which joins the conversation.
//   MODE chat  /v1/chat/completions with text (a model with a tokenizer
//              and a chat template): a system message of its own per
//              conversation, user messages of random words
//   MODE ids   /v1/completions with token ids (any model): the
//              conversation is ids, the answers' ids (return_tokens)
//              appended, then a user message of random ids
// The time to first token of a turn is from sending it to its first
// chunk with text or ids.  Writes OUT.json: {"mode", "conversations",
// "turns", "max_tokens", "wall", "ttft": [turn][conversation] seconds,
// "prompt_tokens", "cached_tokens" (the same shape), "answers":
// [conversation][turn]}; prints the median time to first token of each
// turn.  Loopback only; a failed request ends the run with status 1.
"use strict";
const fs = require("fs");
const http = require("http");

const [url, mode, nConv, nTurns, maxTokens, out] = [process.argv[2], process.argv[3],
	+process.argv[4], +process.argv[5], +process.argv[6], process.argv[7]];
const u = new URL(url);
if (!["127.0.0.1", "localhost", "[::1]"].includes(u.hostname) || !out ||
    !["chat", "ids"].includes(mode)) {
	console.error("usage: loadtest-chat.js http://127.0.0.1:PORT chat|ids CONVERSATIONS " +
		      "TURNS MAX_TOKENS OUT.json (loopback only)");
	process.exit(2);
}
const agent = new http.Agent({ keepAlive: true, maxSockets: nConv });
const WORDS = ("the morning was fine and the ladies walked to the village where the " +
	"officers had come for the ball at the house of a neighbour whose daughters " +
	"were said to be handsome though nobody could tell why their mother spoke of " +
	"little else than marriage and money and the weather in town").split(" ");

// A deterministic generator per conversation (xorshift32).
function rng(seed) {
	let s = (seed * 2654435761) >>> 0 || 1;
	return (n) => {
		s ^= s << 13; s >>>= 0;
		s ^= s >>> 17;
		s ^= s << 5; s >>>= 0;
		return s % n;
	};
}

function words(r, n) {
	const w = [];
	for (let i = 0; i < n; i++)
		w.push(WORDS[r(WORDS.length)]);
	return w.join(" ");
}

function ids(r, n) {
	const a = [];
	for (let i = 0; i < n; i++)
		a.push(10 + r(3990));
	return a;
}

// One streamed request: resolves {ttft, text, ids, usage}.
function send(path, body) {
	return new Promise((resolve, reject) => {
		const t0 = process.hrtime.bigint();
		let first = null, buf = "", text = "", got = [], usage = null, done = false;
		const req = http.request({ host: u.hostname, port: u.port, path, method: "POST", agent,
					   headers: { "Content-Type": "application/json" } }, (res) => {
			if (res.statusCode !== 200) {
				let b = "";
				res.on("data", (d) => { b += d; });
				res.on("end", () => reject(new Error(path + ": " + res.statusCode + " " + b)));
				return;
			}
			res.setEncoding("utf8");
			res.on("data", (d) => {
				buf += d;
				let i;
				while ((i = buf.indexOf("\n\n")) >= 0) {
					const ev = buf.slice(0, i);
					buf = buf.slice(i + 2);
					if (ev === "data: [DONE]") {
						done = true;
						continue;
					}
					const c = JSON.parse(ev.slice(6));
					if (c.error)
						return reject(new Error(JSON.stringify(c.error)));
					if (c.usage)
						usage = c.usage;
					for (const ch of c.choices || []) {
						const t = ch.text !== undefined ? ch.text :
							(ch.delta.content || "") + (ch.delta.reasoning_content || "");
						const k = ch.tokens || [];
						if (first === null && (t || k.length))
							first = process.hrtime.bigint();
						text += t;
						got = got.concat(k);
					}
				}
			});
			res.on("end", () => {
				if (!done || !usage)
					return reject(new Error(path + ": the stream ended early"));
				resolve({ ttft: Number((first || process.hrtime.bigint()) - t0) / 1e9,
					  text, ids: got, usage });
			});
		});
		req.on("error", reject);
		req.end(JSON.stringify(body));
	});
}

async function conversation(k, res) {
	const r = rng(k + 1);
	const common = { max_tokens: maxTokens, temperature: 0, stream: true,
			 stream_options: { include_usage: true } };
	const msgs = [{ role: "system", content: "Conversation " + k + ". " + words(r, 50) }];
	let prompt = ids(r, 70);
	for (let t = 0; t < nTurns; t++) {
		let a;
		if (mode === "chat") {
			msgs.push({ role: "user", content: words(r, 40) });
			a = await send("/v1/chat/completions", { ...common, messages: msgs });
			msgs.push({ role: "assistant", content: a.text });
		} else {
			prompt = prompt.concat(ids(r, 48));
			a = await send("/v1/completions", { ...common, prompt, return_tokens: true,
							     ignore_eos: true });
			prompt = prompt.concat(a.ids);
		}
		res.ttft[t][k] = a.ttft;
		res.prompt_tokens[t][k] = a.usage.prompt_tokens;
		res.cached_tokens[t][k] =
			(a.usage.prompt_tokens_details || {}).cached_tokens || 0;
		res.answers[k].push(mode === "chat" ? a.text : a.ids);
	}
}

function median(a) {
	const s = [...a].sort((x, y) => x - y);
	return s[Math.floor(s.length / 2)];
}

async function main() {
	const grid = () => Array.from({ length: nTurns }, () => new Array(nConv).fill(null));
	const res = { mode, conversations: nConv, turns: nTurns, max_tokens: maxTokens,
		      ttft: grid(), prompt_tokens: grid(), cached_tokens: grid(),
		      answers: Array.from({ length: nConv }, () => []) };
	const t0 = Date.now();
	await Promise.all(Array.from({ length: nConv }, (_, k) => conversation(k, res)));
	res.wall = (Date.now() - t0) / 1000;
	fs.writeFileSync(out, JSON.stringify(res) + "\n");
	for (let t = 0; t < nTurns; t++)
		console.log("turn " + (t + 1) + ": ttft median " + median(res.ttft[t]).toFixed(3) +
			    " s, prompt " + median(res.prompt_tokens[t]) + " tokens, cached " +
			    median(res.cached_tokens[t]));
	agent.destroy();
}

main().catch((e) => {
	console.error("loadtest-chat.js: " + e.message);
	process.exit(1);
});
