// loadtest.js URL CLIENTS SECONDS MAX_TOKENS - a bounded load on ds-serve
// (scripts/loadtest.sh runs it).  CLIENTS loops each send streamed
// /v1/completions requests (ignore_eos, so each is MAX_TOKENS long) over
// keep-alive connections until SECONDS have passed; requests in flight then
// get 60 s more to end.  A request is ok when it answered 200 and its
// stream ended with [DONE] after MAX_TOKENS tokens; failed when anything
// else happened; lost when it had not ended by the grace's end.  Prints
// one JSON object: counts, tokens/s, time to first token (the first text
// event) and latency percentiles in seconds.  Loopback only.
"use strict";
const http = require("http");

const [url, clients, seconds, maxTokens] = [process.argv[2], +process.argv[3],
	+process.argv[4], +process.argv[5]];
const u = new URL(url);
if (!["127.0.0.1", "localhost", "[::1]"].includes(u.hostname)) {
	console.error("loadtest.js: loopback only");
	process.exit(2);
}
const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
const st = { sent: 0, ok: 0, failed: 0, tokens: 0, ttft: [], lat: [], why: {} };
const t0 = Date.now();
let inflight = 0;

function fail(why) {
	st.failed++;
	st.why[why] = (st.why[why] || 0) + 1;
}

function one(k) {
	const body = JSON.stringify({
		prompt: "Client " + k + " request " + st.sent + " " + "x".repeat(k % 13),
		max_tokens: maxTokens, temperature: 0.8, ignore_eos: true, stream: true,
		stream_options: { include_usage: true } });
	const start = process.hrtime.bigint();
	let first = 0n, buf = "", done = false, usage = null, finished = false;
	st.sent++;
	inflight++;
	const end = (why) => {
		if (finished)
			return;
		finished = true;
		inflight--;
		if (why)
			fail(why);
		else if (!done || !usage || usage.completion_tokens !== maxTokens)
			fail("short stream");
		else {
			st.ok++;
			st.tokens += usage.completion_tokens;
			st.ttft.push(Number(first - start) / 1e9);
			st.lat.push(Number(process.hrtime.bigint() - start) / 1e9);
		}
		if (Date.now() - t0 < seconds * 1000)
			one(k);
	};
	const req = http.request({ host: u.hostname, port: u.port, path: "/v1/completions",
				   method: "POST", agent,
				   headers: { "Content-Type": "application/json" } }, (res) => {
		if (res.statusCode !== 200) {
			res.resume();
			res.on("end", () => end("status " + res.statusCode));
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
					return end("error event");
				if (c.usage)
					usage = c.usage;
				if (!first && c.choices.length && c.choices[0].text)
					first = process.hrtime.bigint();
			}
		});
		res.on("end", () => end(null));
		res.on("error", () => end("response error"));
	});
	req.on("error", (e) => end("request error " + e.code));
	req.end(body);
}

function pct(a, p) {
	if (a.length === 0)
		return null;
	const s = [...a].sort((x, y) => x - y);
	return +s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))].toFixed(4);
}

for (let k = 0; k < clients; k++)
	one(k);
const timer = setInterval(() => {
	const t = (Date.now() - t0) / 1000;
	if (t < seconds || (inflight > 0 && t < seconds + 60))
		return;
	clearInterval(timer);
	const wall = (Date.now() - t0) / 1000;
	console.log(JSON.stringify({
		clients, seconds, max_tokens: maxTokens, wall: +wall.toFixed(2),
		sent: st.sent, ok: st.ok, failed: st.failed, lost: inflight, why: st.why,
		tokens: st.tokens, tokens_per_s: +(st.tokens / wall).toFixed(1),
		ttft_p50: pct(st.ttft, 50), ttft_p99: pct(st.ttft, 99),
		latency_p50: pct(st.lat, 50), latency_p99: pct(st.lat, 99) }));
	process.exit(0);
}, 200);
