// K3's chat encoding through the server and the command line, run by
// tests/cli/chat_golden.sh:
//
//   node golden.mjs GOLDEN.json BASE_URL K3 MODEL_DIR
//
// Every case of golden.json (rendered by Moonshot's encoding_k3.py) as a chat request:
// /apply-template returns its exact string; `k3-uring tokenize --chat` prints the same
// string, and its ids are as many as the prompt tokens a chat completion reports.  The
// cases serve refuses on purpose (see docs/agents.md) must be 400s naming the field.
// Needs no npm package.  Prints one "ok:" line per case; exits 1 on the first failure.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";

const [goldenPath, base, k3, modelDir] = process.argv.slice(2);
const golden = JSON.parse(readFileSync(goldenPath, "utf8"));
const refused = { tool_result_explicit_name: "messages[1]" }; // a tool result with no call before it
const tmp = mkdtempSync(path.join(os.tmpdir(), "k3-golden-"));

function body(c) {
  const o = c.options;
  const b = { messages: c.messages, add_generation_prompt: o.add_generation_prompt,
              chat_template_kwargs: { thinking: o.thinking, thinking_effort: o.effort } };
  if (c.tools) b.tools = c.tools;
  if (o.tool_choice !== null) b.tool_choice = o.tool_choice;
  if (o.response_format !== null) b.response_format = o.response_format;
  return b;
}

async function post(route, b) {
  const r = await fetch(base + route, { method: "POST", body: JSON.stringify(b),
                                        headers: { "Content-Type": "application/json" } });
  return [r.status, await r.json()];
}

function tokenize(b, ...flags) {
  const file = path.join(tmp, "req.json");
  writeFileSync(file, JSON.stringify(b));
  const p = spawnSync(k3, ["tokenize", "-m", modelDir, "--chat", file, ...flags], { encoding: "utf8" });
  assert.equal(p.status, 0, `tokenize --chat ${flags.join(" ")}: ${p.stderr}`);
  return p.stdout;
}

try {
  for (const c of golden.cases) {
    const b = body(c);
    const [status, out] = await post("/apply-template", b);
    if (refused[c.name]) {
      assert.equal(status, 400, c.name);
      assert.equal(out.error.param, refused[c.name], `${c.name}: ${out.error.message}`);
      ok(`${c.name}: refused, ${out.error.param}: ${out.error.message}`);
      continue;
    }
    assert.equal(status, 200, `${c.name}: ${JSON.stringify(out)}`);
    assert.equal(out.prompt, c.expected, `${c.name}: /apply-template`);
    assert.equal(tokenize(b), c.expected, `${c.name}: tokenize --chat`);
    const ids = tokenize(b, "--ids").trim().split(",").length;
    let usage = "";
    if (c.options.add_generation_prompt) {
      const [s, done] = await post("/v1/chat/completions", { ...b, max_tokens: 1 });
      assert.equal(s, 200, `${c.name}: ${JSON.stringify(done)}`);
      assert.equal(done.usage.prompt_tokens, ids, `${c.name}: prompt_tokens against tokenize --chat --ids`);
      usage = `, prompt_tokens ${ids}`;
    }
    ok(`${c.name}: /apply-template and tokenize --chat give the encoder's ${c.expected.length} characters${usage}`);
  }
} catch (e) {
  console.error(`FAIL: ${e.stack ?? e}`);
  process.exit(1);
}

function ok(what) { console.log(`ok: ${what}`); }
