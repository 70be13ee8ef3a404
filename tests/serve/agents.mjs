// K3's tool calls, reasoning and structured output through the official OpenAI client
// (npm `openai`) and a JSON Schema validator (npm `ajv`), run by tests/cli/serve_agents.sh:
//
//   node agents.mjs WORKDIR BASE_URL MODEL
//
// The model has random weights, so what it says means nothing; what is checked is that the
// server keeps it inside the grammar a request asks for (a call to a declared function
// whose arguments validate; JSON that validates), splits K3's channels (reasoning_content,
// content, tool_calls), streams what it answers whole, and resumes an agent loop's turns
// from the prompt store with the bytes a fresh computation gives.  Prints one "ok:" line
// per check; exits 1 on the first failure.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";

const [work, baseURL, model] = process.argv.slice(2);
const require = createRequire(path.join(work, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const Ajv = require("ajv").default ?? require("ajv");

const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 300_000 });
const ajv = new Ajv({ strict: false });
const ok = (what) => console.log(`ok: ${what}`);

const weatherSchema = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 12 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city.", parameters: weatherSchema } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"] } } },
];
const validWeather = ajv.compile(weatherSchema);
const noThinking = { chat_template_kwargs: { thinking: false } };
const base = { model, tools, seed: 7, temperature: 0.8, max_tokens: 300, logits_hash: true, ...noThinking };

function checkCall(call, what) {
  assert.equal(call.type, "function", what);
  assert.match(call.id, /^call_/, what);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === "get_weather")
    assert.ok(validWeather(args), `${what}: ${call.function.arguments}: ${ajv.errorsText(validWeather.errors)}`);
  else
    assert.equal(call.function.name, "get_time", what);
  return args;
}

async function requiredCall() {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const named = { type: "function", function: { name: "get_weather" } };
  const whole = await client.chat.completions.create({ ...base, messages, tool_choice: named });
  const c = whole.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, null, "a forced call's content");
  assert.ok(c.message.tool_calls.length >= 1);
  for (const call of c.message.tool_calls) assert.equal(call.function.name, "get_weather");
  const args = checkCall(c.message.tool_calls[0], "named call");
  ok(`named tool_choice: ${c.message.tool_calls.length} call(s), first ${JSON.stringify(args)}`);

  const stream = client.chat.completions.stream({ ...base, messages, tool_choice: named });
  const assembled = (await stream.finalChatCompletion()).choices[0];
  assert.deepEqual(assembled.message.tool_calls.map((t) => [t.id.replace(/^call_[^_]+/, ""), t.function]),
                   c.message.tool_calls.map((t) => [t.id.replace(/^call_[^_]+/, ""), t.function]),
                   "the stream helper's calls");
  assert.equal(assembled.finish_reason, "tool_calls");
  ok("the SDK's stream helper assembles the same calls as the whole answer");

  const single = await client.chat.completions.create({ ...base, messages, tool_choice: "required",
                                                        parallel_tool_calls: false, seed: 11 });
  assert.equal(single.choices[0].message.tool_calls.length, 1, "parallel_tool_calls false");
  checkCall(single.choices[0].message.tool_calls[0], "required call");
  ok(`required tool_choice, parallel_tool_calls false: one call to ${single.choices[0].message.tool_calls[0].function.name}`);
}

// Three rounds: a forced call, its result and the next forced call, then an answer with
// tool_choice "none".  Each round's prompt extends the last one's prompt (a named choice
// adds no note at the end), so it resumes from the state the prompt store kept there
// (cached_tokens grows); its logits hash is the one computed from scratch.
async function agentLoop() {
  const messages = [{ role: "system", content: "Use the tools." },
                    { role: "user", content: "Weather in Oslo, then the time there?" }];
  let cached = -1;
  const rounds = [{ type: "function", function: { name: "get_weather" } },
                  { type: "function", function: { name: "get_time" } }, "none"];
  for (const [i, tool_choice] of rounds.entries()) {
    const req = { ...base, messages, tool_choice, parallel_tool_calls: false, seed: 100 + i,
                  max_tokens: tool_choice === "none" ? 12 : 300 };
    const r = await client.chat.completions.create(req);
    const fresh = await client.chat.completions.create({ ...req, cache_prompt: false });
    assert.equal(r.logits_hash, fresh.logits_hash, `round ${i + 1}: resumed against computed from scratch`);
    const got = r.usage.prompt_tokens_details.cached_tokens;
    assert.ok(got > cached, `round ${i + 1}: cached_tokens ${got} after ${cached}`);
    cached = got;
    const m = r.choices[0].message;
    if (tool_choice === "none") {
      assert.equal(m.tool_calls, undefined, "tool_choice none answers no calls");
      assert.equal(typeof m.content, "string");
      ok(`round 3 (none): ${JSON.stringify(m.content)}, cached_tokens ${got} of ${r.usage.prompt_tokens}`);
      break;
    }
    const call = m.tool_calls[0];
    checkCall(call, `round ${i + 1}`);
    messages.push({ role: "assistant", content: m.content, tool_calls: m.tool_calls });
    for (const c of m.tool_calls)
      messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ ok: true, n: i }) });
    ok(`round ${i + 1}: ${call.function.name}(${call.function.arguments}), cached_tokens ${got} of ${r.usage.prompt_tokens}`);
  }
}

async function structuredOutput() {
  const schema = {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 10 },
      age: { type: "integer", minimum: 0, maximum: 120 },
      tags: { type: "array", items: { type: "string", enum: ["a", "b"] }, maxItems: 3 },
      nick: { type: ["string", "null"], maxLength: 4 },
    },
    required: ["name", "age"],
    additionalProperties: false,
  };
  const valid = ajv.compile(schema);
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.create({
      model, seed, temperature: 1, max_tokens: 200, ...noThinking,
      messages: [{ role: "user", content: "A person, as JSON." }],
      response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "stop", `seed ${seed}: ${JSON.stringify(c.message.content)}`);
    const v = JSON.parse(c.message.content);
    assert.ok(valid(v), `seed ${seed}: ${c.message.content}: ${ajv.errorsText(valid.errors)}`);
    ok(`response_format json_schema, seed ${seed}: ${c.message.content}`);
  }
  const obj = await client.chat.completions.create({
    model, seed: 4, max_tokens: 60, ...noThinking, response_format: { type: "json_object" },
    messages: [{ role: "user", content: "JSON please." }],
  });
  if (obj.choices[0].finish_reason === "stop") {
    const v = JSON.parse(obj.choices[0].message.content);
    assert.ok(v !== null && typeof v === "object" && !Array.isArray(v));
  }
  ok(`response_format json_object: ${obj.choices[0].finish_reason}, ${JSON.stringify(obj.choices[0].message.content).slice(0, 60)}`);
}

async function reasoning() {
  const req = { model, messages: [{ role: "user", content: "Think first." }], max_tokens: 10, temperature: 0 };
  const whole = (await client.chat.completions.create(req)).choices[0].message;
  assert.equal(typeof whole.reasoning_content, "string", "thinking on: reasoning_content");
  assert.equal(whole.content, "", "thinking on, never closed: everything is reasoning");
  let reasoningText = "", content = "";
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoningText += d.reasoning_content ?? "";
    content += d.content ?? "";
  }
  assert.equal(reasoningText, whole.reasoning_content, "streamed reasoning");
  assert.equal(content, whole.content, "streamed content");
  const off = (await client.chat.completions.create({ ...req, reasoning_effort: "none" })).choices[0].message;
  assert.equal(off.reasoning_content, undefined, "thinking off: no reasoning_content");
  assert.equal(typeof off.content, "string");
  ok(`reasoning_content apart from content (${whole.reasoning_content.length} and ${whole.content.length} characters; thinking off: content only)`);
}

try {
  await requiredCall();
  await agentLoop();
  await structuredOutput();
  await reasoning();
} catch (e) {
  console.error(`FAIL: ${e.stack ?? e}`);
  process.exit(1);
}
