// The scenarios of the TypeScript SDK interop test (integration/mcpsdk),
// driven with the official MCP TypeScript SDK's Client and
// StreamableHTTPClientTransport against the demo's /mcp. The Go test starts
// the demo and the proxies, runs this once per protocol version (and
// phase), and checks what it prints: one JSON line per scenario,
//
//	{"scenario": name, "ok": bool, "error": why, "customer": c, "invoices": n}
//
// where ok says the SDK saw what the scenario expects, and invoices is how
// many invoices customer c must have: the side effects, which the Go test
// counts at the demo. It exits 0 whatever the scenarios found.
//
// Environment: SDK_VERSION (2025-11-25: @modelcontextprotocol/sdk;
// 2026-07-28: @modelcontextprotocol/client, pinned to that revision),
// DIRECT_URL, CUT_CALL_URL (a proxy that cuts a tools/call's connection
// once the demo has claimed the call's key), CUT_PROGRESS_URL (one that cuts it at the call's
// first progress notification), RUN (a prefix that makes customers and keys
// unique), PHASE (main, before-restart, after-restart).

const version = process.env.SDK_VERSION;
const modern = version >= '2026-07-28';
const run = process.env.RUN;
const phase = process.env.PHASE || 'main';
const direct = process.env.DIRECT_URL;

const EXTENSION = 'io.github.idemkit/idempotency';
const REPLAYED = 'io.github.idemkit/replayed';
const CODE_KEY_REUSED = -31090;
const CODE_IN_FLIGHT = -31091;
const CODE_INVALID_PARAMS = -32602;

const sdk = modern
	? await import('@modelcontextprotocol/client')
	: {
			...(await import('@modelcontextprotocol/sdk/client/index.js')),
			...(await import('@modelcontextprotocol/sdk/client/streamableHttp.js')),
		};

// connect returns a connected SDK client on url, sending headers on every
// request.
async function connect(url, headers = {}) {
	const options = modern ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {};
	const client = new sdk.Client({ name: 'idem-interop', version: '1.0.0' }, options);
	const transport = new sdk.StreamableHTTPClientTransport(new URL(url), {
		requestInit: { headers },
		reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1, maxReconnectionDelay: 1, reconnectionDelayGrowFactor: 1 },
	});
	await client.connect(transport);
	return { client, transport };
}

// call makes a tools/call with the SDK and returns what an application
// sees: {ok, invoice, replayed, result} or {ok: false, code, data, message}.
async function call(client, params, options = {}) {
	try {
		const result = modern ? await client.callTool(params, options) : await client.callTool(params, undefined, options);
		return {
			ok: !result.isError,
			invoice: result.structuredContent?.id,
			replayed: result._meta?.[REPLAYED] === true,
			result,
		};
	} catch (e) {
		return { ok: false, code: e.code, data: e.data, message: String(e.message ?? e) };
	}
}

// retry calls as a client does after a failure: again until the answer is
// not "still in flight", waiting as data.retryAfterMs says.
async function retry(client, params) {
	for (let i = 0; i < 60; i++) {
		const r = await call(client, params);
		if (r.code !== CODE_IN_FLIGHT) {
			return r;
		}
		await sleep(Math.min(Math.max(r.data?.retryAfterMs ?? 200, 50), 500));
	}
	throw new Error('still in flight after 60 retries');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function invoiceCall(customer, key, { cents = 100, delayMs = 0, meta = {}, extra = {} } = {}) {
	const args = { customer, amount_cents: cents };
	if (delayMs) {
		args.delay_ms = delayMs;
	}
	const _meta = key === undefined ? meta : { ...meta, idempotencyKey: key };
	return { name: 'create_invoice', arguments: args, _meta, ...extra };
}

function expect(cond, what) {
	if (!cond) {
		throw new Error(what);
	}
}

const show = (r) => JSON.stringify({ ...r, result: r.result?.structuredContent });

// replayOfOneRun reports whether r is mcphttp's replay of a call whose tool
// ran once: marked as a replay, and carrying the first run's answer. (Had
// the tool run again, the invoice API would have replayed its own answer to
// it, and the tool's structuredContent would say replayed: true.)
const replayOfOneRun = (r) => r.ok && r.replayed && r.result?.structuredContent?.replayed === false;

// scenarios: name -> async (want) => void. A scenario that creates
// invoices first says how many its customer must have: want(customer, n).
// A thrown error fails the scenario; the invoices are counted either way.
const scenarios = {
	// The server says what it does: the extension, under extensions of
	// server/discover at 2026-07-28, experimental of initialize before.
	async discover() {
		const { client } = await connect(direct);
		const caps = client.getServerCapabilities();
		const ext = (modern ? caps?.extensions : caps?.experimental)?.[EXTENSION];
		await client.close();
		expect(ext?.replayedMeta === REPLAYED, `capabilities ${JSON.stringify(caps)}: no ${EXTENSION} with replayedMeta`);
		for (const src of ['_meta.idempotencyKey', 'params.idempotencyKey', 'Idempotency-Key']) {
			expect(ext.keySources.includes(src), `keySources ${ext.keySources} lack ${src}`);
		}
	},

	// A key in _meta: the retry (a new JSON-RPC id) is the replay, marked.
	async 'key in _meta'(want) {
		const customer = want(`${run} meta`, 1);
		const { client } = await connect(direct);
		const first = await call(client, invoiceCall(customer, `${run}-meta`));
		const again = await call(client, invoiceCall(customer, `${run}-meta`));
		await client.close();
		expect(first.ok && !first.replayed, `first ${show(first)}`);
		expect(replayOfOneRun(again) && again.invoice === first.invoice, `retry ${show(again)}, first invoice ${first.invoice}`);
	},

	// A key in params.idempotencyKey (the SEP-3182 shape).
	async 'key in params'(want) {
		const customer = want(`${run} params`, 1);
		const { client } = await connect(direct);
		const params = invoiceCall(customer, undefined, { extra: { idempotencyKey: `${run}-params` } });
		const first = await call(client, params);
		const again = await call(client, params);
		await client.close();
		expect(first.ok && replayOfOneRun(again) && again.invoice === first.invoice, `first ${show(first)}, retry ${show(again)}`);
	},

	// A key in the Idempotency-Key header, set on the transport.
	async 'key in header'(want) {
		const customer = want(`${run} header`, 1);
		const { client } = await connect(direct, { 'Idempotency-Key': `"${run}-header"` });
		const first = await call(client, invoiceCall(customer));
		const again = await call(client, invoiceCall(customer));
		await client.close();
		expect(first.ok && replayOfOneRun(again) && again.invoice === first.invoice, `first ${show(first)}, retry ${show(again)}`);
	},

	// Two sources naming different keys: refused, nothing runs.
	async 'conflicting keys'(want) {
		const customer = want(`${run} conflict`, 0);
		const { client } = await connect(direct, { 'Idempotency-Key': `"${run}-conflict-b"` });
		const r = await call(client, invoiceCall(customer, `${run}-conflict-a`));
		await client.close();
		expect(r.code === CODE_INVALID_PARAMS && r.data?.reason === 'conflicting_idempotency_keys', `got ${show(r)}`);
	},

	// A key reused with other arguments: refused with the conflict type.
	async 'key reused with other arguments'(want) {
		const customer = want(`${run} reused`, 1);
		const { client } = await connect(direct);
		const first = await call(client, invoiceCall(customer, `${run}-reused`, { cents: 100 }));
		const other = await call(client, invoiceCall(customer, `${run}-reused`, { cents: 200 }));
		await client.close();
		expect(first.ok, `first ${show(first)}`);
		expect(other.code === CODE_KEY_REUSED && other.data?.type === 'idempotency_key_conflict', `other arguments ${show(other)}`);
	},

	// A duplicate of a call still running past the server's wait: told it
	// is in progress (with the type), and its retry gets the result.
	async 'duplicate in progress'(want) {
		const customer = want(`${run} in progress`, 1);
		const { client } = await connect(direct);
		const params = invoiceCall(customer, `${run}-progress`, { delayMs: 2500 });
		const first = call(client, params);
		await sleep(300);
		const dup = await call(client, params);
		const original = await first;
		const again = await retry(client, params);
		await client.close();
		expect(dup.code === CODE_IN_FLIGHT && dup.data?.type === 'idempotency_key_in_progress', `duplicate ${show(dup)}`);
		expect(original.ok && replayOfOneRun(again) && again.invoice === original.invoice, `original ${show(original)}, retry ${show(again)}`);
	},

	// The connection drops while the tool runs; the retry, on a new
	// connection, gets the first run's result.
	async 'connection dropped during the call'(want) {
		const customer = want(`${run} dropped`, 1);
		const params = invoiceCall(customer, `${run}-dropped`, { delayMs: 800 });
		const lossy = await connect(process.env.CUT_CALL_URL);
		const cut = await call(lossy.client, params);
		await lossy.client.close().catch(() => {});
		const { client } = await connect(direct);
		const again = await retry(client, params);
		await client.close();
		expect(!cut.ok, `the cut call got an answer: ${show(cut)}`);
		expect(replayOfOneRun(again), `retry ${show(again)}`);
	},

	// A streaming call (progress notifications) whose connection drops
	// after its first event: the retry gets the result.
	async 'connection dropped mid-stream'(want) {
		const customer = want(`${run} mid-stream`, 1);
		const params = invoiceCall(customer, `${run}-stream`, { delayMs: 500 });
		let events = 0;
		const lossy = await connect(process.env.CUT_PROGRESS_URL);
		// The SDK does not notice a stream cut after an event; the
		// application's timeout ends the call, as it would in production.
		const cut = await call(lossy.client, params, { onprogress: () => events++, timeout: 2000 });
		await lossy.client.close().catch(() => {});
		const { client } = await connect(direct);
		const again = await retry(client, params);
		await client.close();
		expect(events >= 1 && !cut.ok, `cut after ${events} progress events: ${show(cut)}`);
		expect(replayOfOneRun(again), `retry ${show(again)}`);
	},

	// Two callers (bearer tokens) with one key and the same arguments:
	// two invoices, each caller's retry its own.
	async 'two callers, one key'(want) {
		const customer = want(`${run} two callers`, 2);
		const params = invoiceCall(customer, `${run}-shared`);
		const alice = await connect(direct, { Authorization: `Bearer alice-${run}` });
		const bob = await connect(direct, { Authorization: `Bearer bob-${run}` });
		const a = await call(alice.client, params);
		const b = await call(bob.client, params);
		const a2 = await call(alice.client, params);
		await alice.client.close();
		await bob.client.close();
		expect(a.ok && b.ok && a.invoice !== b.invoice && !b.replayed, `alice ${show(a)}, bob ${show(b)}`);
		expect(replayOfOneRun(a2) && a2.invoice === a.invoice, `alice's retry ${show(a2)}`);
	},
};

// Before 2026-07-28 there are sessions.
if (!modern) {
	// No key: a same-session retry, the same JSON-RPC request sent again on
	// the SDK's transport, is keyed by session, id, tool and arguments.
	scenarios['derived key, same-session retry'] = async (want) => {
		const customer = want(`${run} derived`, 1);
		const { client, transport } = await connect(direct);
		const answers = [];
		const onmessage = transport.onmessage;
		transport.onmessage = (msg, extra) => {
			if (msg.id === 4242) {
				answers.push(msg);
				return;
			}
			onmessage?.(msg, extra);
		};
		const request = { jsonrpc: '2.0', id: 4242, method: 'tools/call', params: invoiceCall(customer) };
		for (let i = 0; i < 2; i++) {
			await transport.send(request);
			for (let w = 0; answers.length <= i && w < 100; w++) {
				await sleep(20);
			}
		}
		await client.close();
		const [first, again] = answers.map((m) => m.result);
		expect(first && again, `answers ${JSON.stringify(answers)}`);
		expect(
			again._meta?.[REPLAYED] === true && again.structuredContent.replayed === false && again.structuredContent.id === first.structuredContent.id,
			`answers ${JSON.stringify(answers)}`,
		);
	};

	// The connection drops mid-call and the application closes the
	// session (terminateSession: DELETE); the retry from a new session gets
	// the result.
	scenarios['session closed mid-call'] = async (want) => {
		const customer = want(`${run} session closed`, 1);
		const params = invoiceCall(customer, `${run}-session`, { delayMs: 600 });
		const lossy = await connect(process.env.CUT_CALL_URL);
		const cut = await call(lossy.client, params);
		await lossy.transport.terminateSession();
		await lossy.client.close().catch(() => {});
		const { client } = await connect(direct);
		const again = await retry(client, params);
		await client.close();
		expect(!cut.ok, `the cut call got an answer: ${show(cut)}`);
		expect(replayOfOneRun(again), `retry from a new session ${show(again)}`);
	};
}

// Across a restart of the demo (PostgreSQL): a call before, its retry after.
const restart = {
	async 'replay after restart'(want) {
		const customer = want(`${run} restart`, 1);
		const { client } = await connect(direct);
		const r = await call(client, invoiceCall(customer, `${run}-restart`));
		await client.close();
		if (phase === 'before-restart') {
			expect(r.ok && !r.replayed, `before the restart ${show(r)}`);
			return;
		}
		expect(replayOfOneRun(r), `after the restart ${show(r)}`);
	},
};

const chosen = phase === 'main' ? scenarios : restart;
await Promise.all(
	Object.entries(chosen).map(async ([scenario, f]) => {
		const line = { scenario, ok: true };
		const want = (customer, invoices) => {
			Object.assign(line, { customer, invoices });
			return customer;
		};
		const start = Date.now();
		try {
			await f(want);
		} catch (e) {
			Object.assign(line, { ok: false, error: String(e?.stack ?? e) });
		}
		line.ms = Date.now() - start;
		process.stdout.write(JSON.stringify(line) + '\n');
	}),
);
process.exit(0);
