// The official Ollama JavaScript client against a running meshd: the proof
// that an unmodified Ollama client can call meshd's Ollama API and get
// its receipts.
//
//   MESHD_URL=http://127.0.0.1:8477 node test/ollama/test.mjs
//
// For every receipt received it prints one line "receipt SEQ ID" on
// stdout, so the caller can check the daemon's log against them
// (agent/api/ollama_test.go does). Any failure exits 1 naming the check.
import { Ollama } from 'ollama';

const host = process.env.MESHD_URL;
if (!host) {
  console.error('test.mjs: set MESHD_URL to the daemon, e.g. http://127.0.0.1:8477');
  process.exit(2);
}
const headers = process.env.MESHD_API_KEY ? { Authorization: `Bearer ${process.env.MESHD_API_KEY}` } : undefined;
const client = new Ollama({ host: host.replace(/\/+$/, ''), headers });
const model = process.env.MESHD_MODEL || 'ref-tiny';

class CheckError extends Error {}

function check(cond, what) {
  if (!cond) throw new CheckError(what);
}

// final checks the last message of a serve: Ollama's counts and
// durations, and meshd's receipt, which it reports.
function final(m, where) {
  check(m && m.done === true, `${where}: the last message is not done: ${JSON.stringify(m)}`);
  check(m.done_reason === 'length' || m.done_reason === 'stop', `${where}: done_reason ${m.done_reason}`);
  check(Number.isInteger(m.eval_count) && m.eval_count > 0, `${where}: eval_count ${m.eval_count}`);
  check(Number.isInteger(m.prompt_eval_count) && m.prompt_eval_count > 0, `${where}: prompt_eval_count ${m.prompt_eval_count}`);
  check(Number.isInteger(m.total_duration) && m.total_duration > 0, `${where}: total_duration ${m.total_duration}`);
  const r = m.mesh_receipt;
  check(r && typeof r.id === 'string' && r.id.length > 0, `${where}: no mesh_receipt id: ${JSON.stringify(r)}`);
  check(Number.isInteger(r.sequence) && r.sequence >= 0, `${where}: mesh_receipt without a sequence`);
  check(typeof r.energy_provenance === 'string' && r.energy_provenance.length > 0, `${where}: mesh_receipt without provenance`);
  check(typeof r.envelope === 'string' && r.envelope.length > 0, `${where}: mesh_receipt without its envelope`);
  check(r.backend === model, `${where}: served by ${r.backend}, the request named ${model}`);
  console.log(`receipt ${r.sequence} ${r.id}`);
}

const checks = [
  ['version', async () => {
    const v = await client.version();
    check(typeof v.version === 'string' && v.version.length > 0, `version ${JSON.stringify(v)}`);
  }],
  ['tags', async () => {
    const l = await client.list();
    const names = (l.models ?? []).map((m) => m.name);
    check(names.includes(model), `tags list ${JSON.stringify(names)}, not ${model}`);
    const m = l.models.find((x) => x.name === model);
    check(typeof m.digest === 'string' && m.digest.length === 64, `digest ${m.digest}`);
    check(m.details && typeof m.details.format === 'string', `details ${JSON.stringify(m.details)}`);
  }],
  ['show', async () => {
    const s = await client.show({ model });
    check(Array.isArray(s.capabilities) && s.capabilities.includes('completion'), `capabilities ${JSON.stringify(s.capabilities)}`);
  }],
  ['generate', async () => {
    const g = await client.generate({ model, prompt: 'what is a joule', options: { num_predict: 6 } });
    check(typeof g.response === 'string' && g.response.length > 0, 'empty response');
    check(g.eval_count === 6 && g.done_reason === 'length', `want 6 tokens and length, got ${g.eval_count} ${g.done_reason}`);
    check(Array.isArray(g.context), 'generate without context');
    final(g, 'generate');
  }],
  ['generate stream', async () => {
    const it = await client.generate({ model, prompt: 'name a unit of energy', stream: true, options: { num_predict: 5 } });
    let text = '';
    let n = 0;
    let last;
    for await (const part of it) {
      n++;
      text += part.response;
      last = part;
    }
    check(n === 6, `want 5 pieces and the final message, got ${n}`);
    check(text.split(' ').length === 5, `streamed text ${JSON.stringify(text)}`);
    final(last, 'generate stream');
  }],
  ['chat', async () => {
    const c = await client.chat({
      model, options: { num_predict: 6 },
      messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'what is a watt' }],
    });
    check(c.message?.role === 'assistant' && c.message.content.length > 0, `message ${JSON.stringify(c.message)}`);
    final(c, 'chat');
  }],
  ['chat stream', async () => {
    const it = await client.chat({ model, stream: true, options: { num_predict: 4 }, messages: [{ role: 'user', content: 'count to three' }] });
    let text = '';
    let n = 0;
    let last;
    for await (const part of it) {
      n++;
      check(part.message?.role === 'assistant', `piece ${JSON.stringify(part)}`);
      text += part.message.content;
      last = part;
    }
    check(n === 5, `want 4 pieces and the final message, got ${n}`);
    check(text.length > 0, 'the streamed messages are empty');
    final(last, 'chat stream');
  }],
  ['mesh fields in options', async () => {
    // A floor no backend meets: refused before any work, in Ollama's shape.
    try {
      await client.generate({ model, prompt: 'too good', options: { num_predict: 2, fidelity_floor: 4 } });
    } catch (e) {
      check(e.name === 'ResponseError' && e.status_code === 422, `want ResponseError 422, got ${e.name} ${e.status_code}: ${e.message}`);
      check(typeof e.message === 'string' && e.message.length > 0 && e.message !== '[object Object]', `message ${e.message}`);
      return;
    }
    check(false, 'a floor of F4 was served by the reference backends');
  }],
  ['embed', async () => {
    // The embedding backend answers one vector per text, metered like a
    // serve: the receipt rides in mesh_receipt.
    const emodel = process.env.MESHD_EMBED_MODEL || 'ref-embed';
    const res = await client.embed({ model: emodel, input: ['a joule', 'a watt'] });
    check(Array.isArray(res.embeddings) && res.embeddings.length === 2, `embeddings ${JSON.stringify(res.embeddings)}`);
    check(res.embeddings[0].length > 0 && res.embeddings[0].length === res.embeddings[1].length, 'vectors of unequal length');
    check(JSON.stringify(res.embeddings[0]) !== JSON.stringify(res.embeddings[1]), 'two texts embedded alike');
    const r = res.mesh_receipt;
    check(r && typeof r.id === 'string' && Number.isInteger(r.sequence) && r.backend === emodel, `mesh_receipt ${JSON.stringify(r)}`);
    console.log(`receipt ${r.sequence} ${r.id}`);
    // A model that does not embed is refused as Ollama refuses one.
    try {
      await client.embed({ model, input: 'a joule' });
    } catch (e) {
      check(e.name === 'ResponseError' && e.status_code === 400, `want ResponseError 400, got ${e.name} ${e.status_code}: ${e.message}`);
      check(e.message.includes('does not support embeddings'), `message ${e.message}`);
      return;
    }
    check(false, `${model} embedded although it is not an embedding backend`);
  }],
  ['unknown model shown', async () => {
    try {
      await client.show({ model: 'no-such-model' });
    } catch (e) {
      check(e.status_code === 404 && e.message === "model 'no-such-model' not found", `got ${e.status_code}: ${e.message}`);
      return;
    }
    check(false, 'an unknown model was shown');
  }],
];

if (headers) {
  checks.push(['a wrong key is refused', async () => {
    const wrong = new Ollama({ host: host.replace(/\/+$/, ''), headers: { Authorization: 'Bearer mshd_not-the-key' } });
    try {
      await wrong.generate({ model, prompt: 'let me in', options: { num_predict: 2 } });
    } catch (e) {
      check(e.name === 'ResponseError' && e.status_code === 401, `want ResponseError 401, got ${e.name} ${e.status_code}: ${e.message}`);
      check(typeof e.error === 'string' && e.error.length > 0 && e.error !== '[object Object]', `message ${e.error}`);
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
    const detail = e.status_code ? ` (HTTP ${e.status_code})` : '';
    console.error(`FAIL ${name}: ${e.message}${detail}`);
  }
}
if (failed > 0) {
  console.error(`test.mjs: ${failed} of ${checks.length} checks failed against ${host}`);
  process.exit(1);
}
console.error(`test.mjs: all ${checks.length} checks passed against ${host}`);
