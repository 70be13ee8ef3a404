// `k3-uring serve` through Anthropic's official client (npm `@anthropic-ai/sdk`) on
// POST /v1/messages, run by tests/cli/serve_anthropic.sh:
//
//   node anthropic.mjs WORKDIR BASE_URL MODEL API_KEY
//
// WORKDIR holds node_modules (@anthropic-ai/sdk, ajv); BASE_URL is the server's root (the
// client adds /v1/messages).  An agent loop of three rounds with a get_weather tool:
// round 1 names the tool (tool_choice "tool") and gets a tool_use block whose input
// validates against the tool's input_schema (ajv); round 2 sends the tool_result and
// gets the next call (tool_choice "any"); round 3 (tool_choice "none") gets a final
// answer.  Thinking is off so that a random-weight model's constrained calls end: the
// schema's enums bound every argument.  Then round 1 again through the client's stream
// helper with the same seed: the events come in Anthropic's order, and the message they
// fold into equals the whole one.  Then errors as the client's own classes.  Prints one
// "ok:" line per check; exits 1 on the first failure.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";

const [work, baseURL, model, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(work, "package.json"));
const AnthropicModule = require("@anthropic-ai/sdk");
const Anthropic = AnthropicModule.default ?? AnthropicModule;
const AjvModule = require("ajv");
const Ajv = AjvModule.default ?? AjvModule;

const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const ok = (what) => console.log(`ok: ${what}`);

const weather = {
  name: "get_weather",
  description: "The weather in a city now.",
  input_schema: {
    type: "object",
    properties: {
      city: { type: "string", enum: ["Paris", "Rome", "Oslo"] },
      unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    },
    required: ["city", "unit"],
    additionalProperties: false,
  },
};
const validInput = new Ajv({ strict: true }).compile(weather.input_schema);

// A request of this test: thinking off, a fixed seed (an extension, sent as an extra
// body field), the weather tool.  256 tokens hold a call in K3's markup with k3-tiny's
// 2,048-token vocabulary.
const ask = (messages, tool_choice) => ({
  model, max_tokens: 256, temperature: 1.0, seed: 7, thinking: { type: "disabled" },
  system: "You answer with the tools you have.", tools: [weather], tool_choice, messages,
});

// The one tool_use block of a message that must call get_weather once.
function theCall(msg, round) {
  assert.equal(msg.type, "message", round);
  assert.equal(msg.role, "assistant", round);
  assert.match(msg.id, /^msg_/, round);
  assert.equal(msg.stop_reason, "tool_use", `${round}: ${JSON.stringify(msg)}`);
  assert.equal(msg.stop_sequence, null, round);
  const calls = msg.content.filter((b) => b.type === "tool_use");
  assert.equal(calls.length, 1, `${round}: one call (disable_parallel_tool_use): ${JSON.stringify(msg.content)}`);
  const [call] = calls;
  assert.match(call.id, /^toolu_/, round);
  assert.equal(call.name, "get_weather", round);
  assert.ok(validInput(call.input), `${round}: input ${JSON.stringify(call.input)}: ` +
    JSON.stringify(validInput.errors));
  assert.ok(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0) > 0, round);
  assert.ok(msg.usage.output_tokens > 0, round);
  return call;
}

const result = (call) => ({
  type: "tool_result", tool_use_id: call.id,
  content: JSON.stringify({ city: call.input.city, temperature: 21, unit: call.input.unit }),
});

async function agentLoop() {
  const messages = [{ role: "user", content: "What is the weather in Paris, then in Rome?" }];
  const named = { type: "tool", name: "get_weather", disable_parallel_tool_use: true };
  const first = await client.messages.create(ask(messages, named));
  const call1 = theCall(first, "round 1");
  ok(`round 1: tool_use ${call1.name}(${JSON.stringify(call1.input)}), valid for its schema`);

  messages.push({ role: "assistant", content: first.content });
  messages.push({ role: "user", content: [result(call1)] });
  const second = await client.messages.create(
    ask(messages, { type: "any", disable_parallel_tool_use: true }));
  const call2 = theCall(second, "round 2");
  assert.notEqual(call2.id, call1.id, "each call its own id");
  ok(`round 2: after the tool_result, tool_use ${call2.name}(${JSON.stringify(call2.input)})`);

  messages.push({ role: "assistant", content: second.content });
  messages.push({ role: "user", content: [result(call2), { type: "text", text: "Sum it up." }] });
  const last = await client.messages.create(ask(messages, { type: "none" }));
  assert.ok(["end_turn", "max_tokens"].includes(last.stop_reason), last.stop_reason);
  assert.ok(last.content.every((b) => b.type === "text" || b.type === "thinking"),
    `round 3 has no calls: ${JSON.stringify(last.content)}`);
  const said = last.content.map((b) => b.text ?? b.thinking).join("");
  assert.ok(said.length > 0, `round 3 says something: ${JSON.stringify(last)}`);
  ok(`round 3: a final answer (${last.stop_reason}): ${JSON.stringify(said.slice(0, 60))}`);
  return first;
}

// What two answers to the same request share: the message's fields but the ids (each
// answer's own) and how the prompt's tokens split between computed and resumed from the
// prompt store (the client's own additions, such as parsed_output, left out).
function comparable(msg) {
  const { type, role, model: m, content, stop_reason, stop_sequence, usage: u } =
    JSON.parse(JSON.stringify(msg));
  for (const b of content) if (b.type === "tool_use") b.id = "toolu_";
  const usage = { prompt: u.input_tokens + (u.cache_read_input_tokens ?? 0), output: u.output_tokens };
  return { type, role, model: m, content, stop_reason, stop_sequence, usage };
}

// The events' order: message_start; blocks one at a time, indexes 0, 1, ... (start,
// deltas, stop); message_delta; message_stop.
function checkOrder(events) {
  assert.equal(events[0].type, "message_start");
  assert.deepEqual(events.slice(-2).map((e) => e.type), ["message_delta", "message_stop"]);
  let open = null, next = 0;
  for (const e of events.slice(1, -2)) {
    if (e.type === "content_block_start") {
      assert.equal(open, null, "a block starts while another is open");
      assert.equal(e.index, next++, "block indexes in order");
      open = e.index;
    } else {
      assert.ok(["content_block_delta", "content_block_stop"].includes(e.type), e.type);
      assert.equal(e.index, open, `${e.type} of the open block`);
      if (e.type === "content_block_stop") open = null;
    }
  }
  assert.equal(open, null, "every block stopped");
}

async function streamed(whole) {
  const messages = [{ role: "user", content: "What is the weather in Paris, then in Rome?" }];
  const named = { type: "tool", name: "get_weather", disable_parallel_tool_use: true };
  const stream = client.messages.stream(ask(messages, named));
  const events = [];
  stream.on("streamEvent", (e) => events.push(e));
  const final = await stream.finalMessage();
  checkOrder(events);
  const calls = events.filter((e) => e.type === "content_block_delta" &&
    e.delta.type === "input_json_delta");
  assert.ok(calls.length >= 1, "the call's input as input_json_delta");
  assert.deepEqual(comparable(final), comparable(whole), "the streamed message equals the whole one");
  ok(`stream: ${events.length} events in order, the message equals the whole one`);
}

async function expectError(what, status, klass, type, words, call) {
  try {
    await call();
  } catch (e) {
    assert.ok(e instanceof klass, `${what}: ${e.constructor.name} ${e.message}`);
    assert.equal(e.status, status, what);
    assert.equal(e.error?.type, "error", `${what}: the body ${JSON.stringify(e.error)}`);
    assert.equal(e.error?.error?.type, type, what);
    for (const w of words) assert.ok(e.error.error.message.includes(w), `${what}: ${e.message}`);
    ok(`${what}: ${e.constructor.name} ${e.status} ${e.error.error.type}: ${e.error.error.message}`);
    return;
  }
  assert.fail(`${what}: no error`);
}

async function errors() {
  const hi = [{ role: "user", content: "hi" }];
  await expectError("no max_tokens", 400, Anthropic.BadRequestError, "invalid_request_error",
    ["max_tokens"], () => client.messages.create({ model, messages: hi }));
  await expectError("an image", 400, Anthropic.BadRequestError, "invalid_request_error",
    ["messages[0].content[1].type"], () => client.messages.create({
      model, max_tokens: 4, messages: [{ role: "user", content: [
        { type: "text", text: "What is this?" },
        { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
      ] }],
    }));
  await expectError("a tool_result naming no call", 400, Anthropic.BadRequestError,
    "invalid_request_error", ["messages[0].content[0].tool_use_id"],
    () => client.messages.create({ model, max_tokens: 4, messages: [{ role: "user", content: [
      { type: "tool_result", tool_use_id: "toolu_nowhere", content: "21" }] }] }));
  const stranger = new Anthropic({ baseURL, apiKey: "not-the-key", maxRetries: 0 });
  await expectError("wrong key", 401, Anthropic.AuthenticationError, "authentication_error", [],
    () => stranger.messages.create({ model, max_tokens: 1, messages: hi }));
}

const t0 = Date.now();
const first = await agentLoop();
await streamed(first);
await errors();
console.log(`anthropic client checks done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
