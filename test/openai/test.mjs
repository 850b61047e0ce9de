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
    for await (const chunk of stream) {
      n++;
      text += chunk.choices?.[0]?.delta?.content ?? '';
      last = chunk;
    }
    check(n > 1, `want several chunks, got ${n}`);
    check(text.length > 0, 'the streamed deltas are empty');
    receipt(last?.receipt, 'chat stream (last chunk)');
  }],
  ['completions stream', async () => {
    const stream = await client.completions.create({ model: 'meshd', prompt: 'name a unit of energy', max_tokens: 8, stream: true });
    let text = '';
    let last;
    let n = 0;
    for await (const chunk of stream) {
      n++;
      text += chunk.choices?.[0]?.text ?? '';
      last = chunk;
    }
    check(n > 1, `want several chunks, got ${n}`);
    check(text.length > 0, 'the streamed text is empty');
    receipt(last?.receipt, 'completions stream (last chunk)');
  }],
];

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
