// `k3-uring serve` through the official OpenAI client (npm `openai`), run by
// tests/cli/serve_openai.sh:
//
//   node openai.mjs WORKDIR BASE_URL MODEL API_KEY
//
// WORKDIR holds node_modules/openai.  Chat and completions, whole and streamed (greedy,
// so the streamed text must equal the whole one), the model list, stream_options'
// usage, our logits_hash extension passed as an extra body field, and the client's own
// error classes for a wrong model (400 model_not_found), a bad value and a wrong key
// (401).  Prints one "ok:" line per check; exits 1 on the first failure.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";

const [work, baseURL, model, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(work, "package.json"));
const OpenAI = require("openai").default ?? require("openai");

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const ok = (what) => console.log(`ok: ${what}`);
const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: [{ type: "text", text: "Name a " }, { type: "text", text: "colour." }] },
];

async function chat() {
  const whole = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, logits_hash: true,
  });
  const choice = whole.choices[0];
  assert.equal(whole.object, "chat.completion");
  assert.equal(choice.message.role, "assistant");
  assert.equal(typeof choice.message.content, "string");
  assert.ok(["stop", "length"].includes(choice.finish_reason), choice.finish_reason);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
  assert.match(whole.logits_hash, /^[0-9a-f]{16}$/);
  ok(`chat: ${JSON.stringify(choice.message.content)}, ${choice.finish_reason}`);

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, stream: true,
    stream_options: { include_usage: true }, logits_hash: true,
  });
  let text = "", role = null, finish = null, usage = null, hash = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    if (c?.delta?.role) role = c.delta.role;
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
    if (chunk.logits_hash) hash = chunk.logits_hash;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, "assistant");
  assert.equal(text, choice.message.content, "streamed text");
  assert.equal(finish, choice.finish_reason);
  assert.deepEqual(usage, whole.usage);
  assert.equal(hash, whole.logits_hash, "the stream's logits_hash");
  ok(`chat stream: ${chunks} chunks, the same text, finish, usage and logits hash`);
}

async function completions() {
  const whole = await client.completions.create({
    model, prompt: "The history of", max_tokens: 5, temperature: 0,
  });
  assert.equal(whole.object, "text_completion");
  assert.equal(whole.usage.completion_tokens, 5);
  const stream = await client.completions.create({
    model, prompt: "The history of", max_tokens: 5, temperature: 0, stream: true,
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, "length");
  ok(`completions, whole and streamed: ${JSON.stringify(text)}`);

  const seeded = { model, prompt: "Once", max_tokens: 5, temperature: 1.0, seed: 7 };
  const a = await client.completions.create(seeded);
  const b = await client.completions.create(seeded);
  assert.equal(a.choices[0].text, b.choices[0].text, "the same seed");
  ok("the same seed, the same sampled text");
}

async function models() {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
  ok(`models: ${ids}`);
}

async function expectError(what, status, klass, fields, call) {
  try {
    await call();
  } catch (e) {
    assert.ok(e instanceof klass, `${what}: ${e.constructor.name} ${e.message}`);
    assert.equal(e.status, status, what);
    for (const [k, v] of Object.entries(fields)) assert.equal(e[k], v, `${what}: ${k}`);
    ok(`${what}: ${e.constructor.name} ${e.status} ${e.message}`);
    return;
  }
  assert.fail(`${what}: no error`);
}

async function errors() {
  await expectError("wrong model", 400, OpenAI.BadRequestError,
    { code: "model_not_found", param: "model", type: "invalid_request_error" },
    () => client.chat.completions.create({ model: "gpt-4o", messages, max_tokens: 1 }));
  await expectError("top_p 2", 400, OpenAI.BadRequestError, { param: "top_p" },
    () => client.completions.create({ model, prompt: "x", top_p: 2 }));
  const stranger = new OpenAI({ baseURL, apiKey: "not-the-key", maxRetries: 0 });
  await expectError("wrong key", 401, OpenAI.AuthenticationError, {},
    () => stranger.completions.create({ model, prompt: "x", max_tokens: 1 }));
}

const t0 = Date.now();
await chat();
await completions();
await models();
await errors();
console.log(`openai client checks done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
