// The official OpenAI Node client against a running meshd: the proof that
// an unmodified OpenAI client can call meshd and get its receipts.
//
//   MESHD_URL=http://127.0.0.1:8477 node test/openai/test.mjs
//
// With MESHD_API_KEY set, that bearer token is the client's API key and
// the script also checks that a wrong key is refused as OpenAI refuses
// one (401, AuthenticationError, code invalid_api_key).
//
// For every receipt received it prints one line "receipt SEQ ID" on
// stdout, so the caller can check the daemon's log against them
// (agent/api/openai_test.go does). Any failure exits 1 naming the check.
import OpenAI from 'openai';

const base = process.env.MESHD_URL;
if (!base) {
  console.error('test.mjs: set MESHD_URL to the daemon, e.g. http://127.0.0.1:8477');
  process.exit(2);
}

// maxRetries 0: a retried serve would seal a second receipt the script
// never sees, and the count check would then blame the daemon.
const apiKey = process.env.MESHD_API_KEY || undefined;
const baseURL = base.replace(/\/+$/, '') + '/v1';
const client = new OpenAI({ baseURL, apiKey: apiKey ?? 'unused', maxRetries: 0, timeout: 60_000 });

class CheckError extends Error {}

function check(cond, what) {
  if (!cond) throw new CheckError(what);
}

// receipt checks that r is a meshd receipt as the API sends it and
// reports it.
function receipt(r, where) {
  check(r && typeof r === 'object', `${where}: no "receipt" field`);
  check(typeof r.id === 'string' && r.id.length > 0, `${where}: receipt without an id: ${JSON.stringify(r)}`);
  check(Number.isInteger(r.sequence) && r.sequence >= 0, `${where}: receipt without a sequence: ${JSON.stringify(r)}`);
  check(typeof r.envelope === 'string' && r.envelope.length > 0, `${where}: receipt without its envelope`);
  console.log(`receipt ${r.sequence} ${r.id}`);
  return r;
}

const checks = [
  ['completions', async () => {
    const { data, response } = await client.completions
      .create({ model: 'meshd', prompt: 'what is a joule', max_tokens: 8 })
      .withResponse();
    check(data.choices?.length === 1, `want one choice, got ${JSON.stringify(data.choices)}`);
    check(typeof data.choices[0].text === 'string' && data.choices[0].text.length > 0, 'empty completion text');
    const r = receipt(data.receipt, 'completions');
    const hdr = response.headers.get('mesh-receipt-id');
    check(hdr === r.id, `mesh-receipt-id header ${hdr} is not the body's receipt id ${r.id}`);
  }],
  ['chat', async () => {
    const c = await client.chat.completions.create({
      model: 'meshd', max_tokens: 8,
      messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'what is a watt' }],
    });
    const m = c.choices?.[0]?.message;
    check(m && m.role === 'assistant', `want an assistant message, got ${JSON.stringify(m)}`);
    check(typeof m.content === 'string' && m.content.length > 0, 'empty assistant message');
    receipt(c.receipt, 'chat');
  }],
  ['chat stream', async () => {
    const stream = await client.chat.completions.create({
      model: 'meshd', max_tokens: 8, stream: true,
      messages: [{ role: 'user', content: 'count to three' }],
    });
    let text = '';
    let last;
    let n = 0;
    const ids = new Set();
    for await (const chunk of stream) {
      n++;
      text += chunk.choices?.[0]?.delta?.content ?? '';
      check(typeof chunk.model === 'string' && chunk.model.length > 0, `chunk ${n} has no model: ${JSON.stringify(chunk)}`);
      check(last === undefined || chunk.model === last.model, `chunk ${n} names model ${chunk.model}, the one before ${last?.model}`);
      ids.add(chunk.id);
      last = chunk;
    }
    check(n > 1, `want several chunks, got ${n}`);
    check(ids.size === 1, `one stream, several ids: ${[...ids]}`);
    check(text.length > 0, 'the streamed deltas are empty');
    const r = receipt(last?.receipt, 'chat stream (last chunk)');
    check(last.model === r.receipt.backend, `the chunks name ${last.model}, the receipt ${r.receipt.backend}`);
  }],
  ['completions stream', async () => {
    const stream = await client.completions.create({ model: 'meshd', prompt: 'name a unit of energy', max_tokens: 8, stream: true });
    let text = '';
    let last;
    let n = 0;
    for await (const chunk of stream) {
      n++;
      text += chunk.choices?.[0]?.text ?? '';
      check(typeof chunk.model === 'string' && chunk.model.length > 0, `chunk ${n} has no model: ${JSON.stringify(chunk)}`);
      last = chunk;
    }
    check(n > 1, `want several chunks, got ${n}`);
    check(text.length > 0, 'the streamed text is empty');
    receipt(last?.receipt, 'completions stream (last chunk)');
  }],
];

// refused runs call and checks it is refused as a 400 naming param, as a
// BadRequestError that a client does not retry.
async function refused(call, param, what) {
  try {
    await call();
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, `${what}: want BadRequestError, got ${e?.constructor?.name}: ${e?.message}`);
    check(e.status === 400 && e.param === param, `${what}: want 400 naming ${param}, got ${e.status} param ${e.param} (${e.message})`);
    return;
  }
  check(false, `${what}: served`);
}

checks.push(
  ['stop', async () => {
    const ask = { model: 'meshd', prompt: 'stop somewhere', max_tokens: 8 };
    const full = await client.completions.create(ask);
    receipt(full.receipt, 'stop (unstopped)');
    check(full.choices[0].finish_reason === 'length', `unstopped finish_reason ${full.choices[0].finish_reason}`);
    const words = full.choices[0].text.split(' ');
    // The third word: its first occurrence ends the text.
    const stop = ' ' + words[2];
    const want = full.choices[0].text.slice(0, full.choices[0].text.indexOf(stop));
    const cut = await client.completions.create({ ...ask, stop: [stop, 'never-said'] });
    receipt(cut.receipt, 'stop');
    check(cut.choices[0].text === want, `stop ${JSON.stringify(stop)}: text ${JSON.stringify(cut.choices[0].text)}, want ${JSON.stringify(want)}`);
    check(cut.choices[0].finish_reason === 'stop', `stop: finish_reason ${cut.choices[0].finish_reason}, want stop`);
    const out = cut.receipt.receipt.tokens_out;
    check(cut.usage.completion_tokens === out && out < 8, `stop: usage ${cut.usage.completion_tokens}, receipt tokens_out ${out}: want what was delivered, under 8`);
    // Streamed: no delta carries any part of the stop string.
    const stream = await client.completions.create({ ...ask, stop, stream: true });
    let text = '';
    let last;
    for await (const chunk of stream) {
      text += chunk.choices?.[0]?.text ?? '';
      last = chunk;
    }
    receipt(last?.receipt, 'stop stream');
    check(text === want, `stop stream: ${JSON.stringify(text)}, want ${JSON.stringify(want)}`);
    check(last.choices[0].finish_reason === 'stop', `stop stream: finish_reason ${last.choices[0].finish_reason}`);
    await refused(() => client.completions.create({ ...ask, stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop', 'five stop strings');
  }],
  ['unique ids', async () => {
    const ask = { model: 'meshd', prompt: 'the same request twice', max_tokens: 2 };
    const a = await client.completions.create(ask);
    const b = await client.completions.create(ask);
    receipt(a.receipt, 'unique ids (first)');
    receipt(b.receipt, 'unique ids (second)');
    check(a.id !== b.id, `two serves, one id ${a.id}`);
    check(/^cmpl-[0-9a-f]{24}$/.test(a.id), `id ${a.id} is not cmpl- and 24 hex digits`);
    check(a.choices[0].text === b.choices[0].text, 'the reference engine is deterministic: the same text');
  }],
  ['embeddings', async () => {
    const { data, response } = await client.embeddings
      .create({ model: 'meshd', input: ['a watt is a joule per second', 'a shunt'] })
      .withResponse();
    check(data.data?.length === 2, `want two embeddings, got ${data.data?.length}`);
    for (const [i, d] of data.data.entries()) {
      check(d.index === i && d.object === 'embedding', `embedding ${i}: ${JSON.stringify({ ...d, embedding: undefined })}`);
      check(d.embedding.length === 32, `embedding ${i} has ${d.embedding.length} values, want 32`);
      const norm = Math.sqrt(d.embedding.reduce((s, x) => s + x * x, 0));
      check(Math.abs(norm - 1) < 1e-5, `embedding ${i} has norm ${norm}, want 1`);
    }
    check(data.data[0].embedding.some((x, k) => x !== data.data[1].embedding[k]), 'two texts, one vector');
    check(data.model === 'ref-embed', `model ${data.model}, want the embedding backend ref-embed`);
    check(data.usage.prompt_tokens > 0, `usage ${JSON.stringify(data.usage)}`);
    const r = receipt(data.receipt, 'embeddings');
    check(response.headers.get('mesh-receipt-id') === r.id, 'embeddings: the header is not the receipt');
    check(r.receipt.tokens_out === 2, `embeddings: receipt tokens_out ${r.receipt.tokens_out}, want 2 (the vectors)`);
    // float, as asked, is the same vector.
    const f = await fetch(`${baseURL}/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
      body: JSON.stringify({ input: 'a shunt', encoding_format: 'float' }) });
    const fb = await f.json();
    receipt(fb.receipt, 'embeddings (float)');
    // The JSON numbers are float32 values written shortest: as float32
    // they are exactly the base64 ones.
    const asF32 = fb.data[0].embedding.map(Math.fround);
    check(asF32.length === 32 && asF32.every((x, k) => x === data.data[1].embedding[k]), 'float and base64 disagree');
    await refused(() => client.embeddings.create({ model: 'meshd', input: 'x', dimensions: 8 }), 'dimensions', 'dimensions');
  }],
  ['the model pins a backend', async () => {
    const c = await client.completions.create({ model: 'ref-mid', prompt: 'pinned', max_tokens: 2 });
    const r = receipt(c.receipt, 'pinned');
    check(c.model === 'ref-mid' && r.receipt.backend === 'ref-mid', `pinned to ref-mid, served by ${c.model}`);
    check(r.route_candidates?.length === 1 && r.route_candidates[0].backend === 'ref-mid', `candidates ${JSON.stringify(r.route_candidates)}`);
    const a = await client.completions.create({ model: 'mid-alias', prompt: 'pinned', max_tokens: 2 });
    check(receipt(a.receipt, 'alias').receipt.backend === 'ref-mid', `the alias served on ${a.model}`);
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    for (const id of ['ref-tiny', 'ref-mid', 'mid-alias', 'ref-embed']) check(ids.includes(id), `models ${ids} lack ${id}`);
    // Pinned, still under the floor: ref-tiny serves F1.
    try {
      await client.completions.create({ model: 'ref-tiny', prompt: 'pinned', max_tokens: 2, fidelity_floor: 3 });
      check(false, 'a pinned backend under the floor served');
    } catch (e) {
      check(e instanceof OpenAI.UnprocessableEntityError && e.code === 'no_route', `pinned under the floor: ${e?.constructor?.name} ${e?.status} ${e?.code}`);
    }
  }],
  ['refusals are 400s naming the field', async () => {
    const msgs = [{ role: 'user', content: 'hi' }];
    await refused(() => client.chat.completions.create({ model: 'meshd', messages: msgs, n: 2 }), 'n', 'n 2');
    await refused(() => client.chat.completions.create({ model: 'meshd', messages: msgs,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }), 'tools', 'tools');
    await refused(() => client.chat.completions.create({ model: 'meshd', messages: msgs, response_format: { type: 'json_object' } }),
      'response_format', 'response_format');
    await refused(() => client.chat.completions.create({ model: 'meshd', messages: msgs, logprobs: true }), 'logprobs', 'logprobs');
    await refused(() => client.chat.completions.create({ model: 'meshd', messages: msgs, fidelity_floor: 'high' }), 'fidelity_floor', 'a mistyped mesh field');
    // A chat pinned to a backend that cannot answer one.
    await refused(() => client.chat.completions.create({ model: 'ref-embed', messages: msgs }), 'model', 'chat on an embedding backend');
  }],
  ['unknown paths answer JSON', async () => {
    try {
      await client.get('/no-such-endpoint');
      check(false, 'a missing endpoint answered');
    } catch (e) {
      check(e instanceof OpenAI.NotFoundError && e.code === 'not_found', `want NotFoundError not_found, got ${e?.constructor?.name} ${e?.code}: ${e?.message}`);
    }
  }],
);

if (apiKey) {
  checks.push(['models with the key', async () => {
    const page = await client.models.list();
    check(Array.isArray(page.data) && page.data.length > 0, `want models, got ${JSON.stringify(page.data)}`);
  }]);
  checks.push(['a wrong key is refused', async () => {
    const wrong = new OpenAI({ baseURL, apiKey: 'mshd_not-the-key', maxRetries: 0, timeout: 60_000 });
    try {
      await wrong.completions.create({ model: 'meshd', prompt: 'let me in', max_tokens: 2 });
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError, `want AuthenticationError, got ${e?.constructor?.name}: ${e?.message}`);
      check(e.status === 401 && e.code === 'invalid_api_key', `want 401 invalid_api_key, got ${e.status} ${e.code}`);
      return;
    }
    check(false, 'a wrong key was served');
  }]);
}

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.error(`ok   ${name}`);
  } catch (e) {
    failed++;
    // An APIError carries meshd's status and named reason; say both.
    const detail = e instanceof OpenAI.APIError ? ` (HTTP ${e.status}, code ${e.code ?? '-'})` : '';
    console.error(`FAIL ${name}: ${e.message}${detail}`);
  }
}
if (failed > 0) {
  console.error(`test.mjs: ${failed} of ${checks.length} checks failed against ${base}`);
  process.exit(1);
}
console.error(`test.mjs: all ${checks.length} checks passed against ${base}`);
