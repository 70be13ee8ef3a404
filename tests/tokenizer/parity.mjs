// Parity of `k3-uring tokenize` with js-tiktoken, run by tests/cli/tokenizer_parity.sh.
//
//   node parity.mjs K3_BINARY WORKDIR REPO_ROOT
//
// WORKDIR holds node_modules/js-tiktoken.  For cl100k_base and o200k_base the vocabulary
// js-tiktoken ships is written out as WORKDIR/<name>/tiktoken.model (its specials as
// tokenizer_config.json), then every case below is encoded by js-tiktoken and by k3-uring
// (--no-specials --pattern <name>), and the ids must be identical and decode back to the
// same bytes; a few texts are also encoded with every special allowed (--special).  A third run checks K3's own
// pattern: K3's pat_str written as a JavaScript `v`-flag regex (which has `&&`, and whose
// \p{Script=Han} is the Script property, as in tiktoken's Rust regex) splits the text,
// js-tiktoken's BPE encodes each piece with the o200k ranks, and k3-uring must agree using
// its PCRE2 rewrite.
//
// Known js-tiktoken / tiktoken differences, left out of the cases: JavaScript's \s also
// matches U+FEFF and not U+0085, and js-tiktoken spells (?i:'s) as 's|'S, so "'ſ" (U+017F)
// is a contraction only in tiktoken.
import { spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [k3, work, root] = process.argv.slice(2);
const require = createRequire(path.join(work, "package.json"));
const { Tiktoken } = require("js-tiktoken/lite");
const t0 = Date.now();

// ---------------------------------------------------------------- the cases
const cases = [];
const add = (name, text) => cases.push({ name, text });
add("english", "The quick brown fox jumps over the lazy dog. It's 5 o'clock somewhere!");
add("contractions", "I'LL go, you'll see; they're here, we've won, I'm done, he'd say, she's it, don't, DON'T, Can't, O'Neil's");
add("apostrophes", "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'x '' ''' it's's rock'n'roll");
add("mixed case", "camelCase PascalCase snake_case SCREAMING_CASE HTTPServer iPhone McDonald");
add("digits", "0 12 123 1234 12345 123456789 3.14159 1,000,000 0x7FFF 1e-10 ١٢٣٤٥ ३४५ 二〇二四");
add("crlf", "line one\r\nline two\r\n\r\nline four\rcarriage\n\nend\r\n");
add("whitespace", "a  b   c    d\t\te\t \tf \n g  \n\n  h   ");
add("whitespace runs", " ".repeat(100) + "x" + " ".repeat(37) + "\n".repeat(20) + "\t".repeat(64) + "y" + " \n".repeat(30));
add("trailing spaces", "end with spaces   ");
add("only spaces", "       ");
add("code c", "int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++)\n        printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n");
add("code python", "def f(x: int) -> list[str]:\n    return [str(i) for i in range(x) if i % 2 == 0]  # evens\n\n\nclass A(B):\n    pass\n");
add("code js", "const x = { a: 1, 'b-c': [2, 3], `t${y}`: null };\nx?.a ?? (() => {})();\n// comment\n/* block */ a/b/c //= 3;\n");
add("punctuation", "!!! ??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>> /// \\\\\\ |||");
add("urls", "https://example.com/path/to/file?query=1&x=y#frag mailto:a@b.c /usr/bin/env C:\\Windows\\");
add("chinese", "每天傍晚，灯塔看守人都会爬上塔楼的九十二级台阶。他说：“我不数船。”中文、日本・々〆〇");
add("japanese", "毎晩、灯台守は塔の九十二段の階段を上り、ガラスの塩を拭き取って、ランプに火をともした。カタカナとひらがなー");
add("korean", "매일 저녁 등대지기는 탑의 아흔두 계단을 올라 유리의 소금을 닦고 등불을 켰다.");
add("arabic", "في كل مساء كان حارس المنارة يصعد درجات البرج، ويمسح الملح عن الزجاج. «لا أعدّ السفن»");
add("hebrew", "בכל ערב טיפס שומר המגדלור במדרגות המגדל.");
add("hindi", "हर शाम प्रकाशस्तंभ का रखवाला मीनार की सीढ़ियाँ चढ़ता।");
add("thai", "ทุกเย็นผู้เฝ้าประภาคารจะปีนบันได");
add("cyrillic greek", "Каждый вечер смотритель маяка поднимался. Κάθε βράδυ ο φύλακας του φάρου ανέβαινε.");
add("vietnamese", "Mỗi buổi tối, người gác hải đăng leo chín mươi hai bậc thang.");
add("emoji", "🌊🚢💡 🌧️ 👍🏽 ❤️ 🇫🇷🇯🇵 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍🤝‍🧑🏻 a🙂b 😀😀😀");
add("combining", "cafe\u0301 na\u0308ive man\u0303ana Zo\u0308e e\u0301\u0301\u0301 \u0301start a\u0308\u0304 Ǫ̆ ̀x Z̤͔ͧ̑̓ä͖̭̈̇l͖͎g̞̥͈ͮ");
add("symbols", "≤ ≥ ≠ → ← ∑ ∫ √ ∞ °C ±0.5 € £ ¥ © ® ™ § ¶ • … – — “quotes” ‘single’ «guillemets»");
add("specials as text", "<|endoftext|> <|fim_prefix|> <|open|>message role=\"user\"<|sep|> [BOS] <|end_of_msg|>");
add("unicode spaces", "a\u00a0b\u2003c\u3000d\u2028e\u2029f\u202fg\u205fh\u1680i\u180ej\u200bk");
add("control", "\u0000\u0001\u0007\u001b[31mred\u001b[0m\u007f\u0080\u009f");
add("long word", "Pneumonoultramicroscopicsilicovolcanoconiosis Supercalifragilisticexpialidocious " + "abc".repeat(200));
add("long punct", "=".repeat(300) + "\n" + "-*".repeat(150));
add("han long", "漢".repeat(500));
add("mixed scripts", "Tokyo東京Tōkyō도쿄Токио طوكيو 1234abc中文ABC漢字カナ");
add("astral", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 𓀀𓀁 𠀀𠀁𪜀 🀄");
for (const f of ["multilingual.txt", "code.txt"])
  add("corpus " + f, fs.readFileSync(path.join(root, "engine/synth/corpus", f), "utf8"));
add("corpus licenses (first 20000 chars)",
    fs.readFileSync(path.join(root, "engine/synth/corpus/licenses.txt"), "utf8").slice(0, 20000));
add("everything", cases.map((c) => c.text).join("\n\n"));

// ---------------------------------------------------------------- helpers
function exportVocab(name) {
  const ranks = require(`js-tiktoken/ranks/${name}`);
  const enc = new Tiktoken(ranks);
  const dir = path.join(work, name);
  const file = path.join(dir, "tiktoken.model");
  if (!fs.existsSync(file) || !fs.existsSync(path.join(dir, "tokenizer_config.json"))) {
    fs.mkdirSync(dir, { recursive: true });
    const added = {};
    for (const [content, id] of Object.entries(ranks.special_tokens)) added[id] = { content, special: true };
    fs.writeFileSync(path.join(dir, "tokenizer_config.json"),
                     JSON.stringify({ added_tokens_decoder: added }, null, 2) + "\n");
    const lines = [...enc.textMap.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([rank, bytes]) => `${Buffer.from(bytes).toString("base64")} ${rank}`);
    fs.writeFileSync(file + ".tmp", lines.join("\n") + "\n");
    fs.renameSync(file + ".tmp", file);
  }
  return { ranks, enc, dir };
}

// k3-uring tokenize with INPUT on stdin; resolves to its stdout, rejects naming the command.
function k3run(args, input) {
  return new Promise((resolve, reject) => {
    const child = spawn(k3, ["tokenize", ...args]);
    const out = [], err = [];
    child.stdout.on("data", (b) => out.push(b));
    child.stderr.on("data", (b) => err.push(b));
    child.on("error", reject);
    child.on("close", (status) => {
      if (status === 0) resolve(Buffer.concat(out));
      else reject(new Error(`k3-uring tokenize ${args.join(" ")} exited ${status}: ${Buffer.concat(err)}`));
    });
    child.stdin.on("error", () => {}); // a child that exits early: its status says why
    child.stdin.end(input);
  });
}

const show = (enc, id) => JSON.stringify(Buffer.from(enc.textMap.get(id) ?? []).toString("latin1"));

// Every comparison is queued, then run K3_TEST_PAR at a time (each spawns k3-uring, whose
// start-up reading a vocabulary is most of its cost); their reports print in queue order.
const queued = [];
let failures = 0, checked = 0;
function compare(label, enc, dir, pattern, text, want, special = false) {
  const caseFile = path.join(work, `case${queued.length}.txt`);
  queued.push(() => compareNow(label, enc, dir, pattern, text, want, special, caseFile));
}

async function compareNow(label, enc, dir, pattern, text, want, special, caseFile) {
  fs.writeFileSync(caseFile, text);
  const how = special ? ["--special"] : ["--no-specials"];
  const out = (await k3run(["-m", dir, ...how, "--pattern", pattern, "-f", caseFile], "")).toString().trim();
  fs.unlinkSync(caseFile);
  const got = out === "" ? [] : out.split(",").map(Number);
  let i = 0;
  while (i < got.length && i < want.length && got[i] === want[i]) i++;
  if (i < got.length || i < want.length)
    return [`FAIL ${label}: first difference at token ${i} of ${want.length} (k3 has ${got.length})`,
            `  js-tiktoken: ${want.slice(Math.max(0, i - 2), i + 4).map((x) => `${x}=${show(enc, x)}`).join(" ")}`,
            `  k3-uring:    ${got.slice(Math.max(0, i - 2), i + 4).map((x) => `${x}=${show(enc, x)}`).join(" ")}`];
  const dec = await k3run(["-m", dir, ...how, "--decode", got.join(",")], "");
  if (!dec.equals(Buffer.from(text, "utf8")))
    return [`FAIL ${label}: decode is not lossless (${dec.length} bytes for ${Buffer.byteLength(text)})`];
  return [];
}

async function runQueued() {
  const reports = new Array(queued.length);
  let next = 0;
  const worker = async () => {
    while (next < queued.length) {
      const i = next++;
      reports[i] = await queued[i]();
    }
  };
  const width = Math.max(1, Number(process.env.K3_TEST_PAR) || 2);
  await Promise.all(Array.from({ length: width }, worker));
  for (const lines of reports) {
    checked++;
    if (lines.length) failures++;
    for (const line of lines) console.log(line);
  }
}

// ---------------------------------------------------------------- tiktoken's own patterns
const vocabs = {};
for (const [name, pattern] of [["cl100k_base", "cl100k"], ["o200k_base", "o200k"]]) {
  const { enc, dir } = (vocabs[name] = exportVocab(name));
  for (const c of cases) compare(`${name} / ${c.name}`, enc, dir, pattern, c.text, enc.encode(c.text, [], []));
  // Template text: every special allowed, matched anywhere (none is a prefix of another).
  for (const text of ["<|endoftext|>", "a<|endoftext|>b<|endofprompt|>", "x<|endoftext|><|endoftext|> y",
                      "<|endoftext|", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>"])
    compare(`${name} / specials allowed: ${JSON.stringify(text)}`, enc, dir, pattern, text,
            enc.encode(text, "all"), true);
}

// ---------------------------------------------------------------- K3's pattern
// K3's pat_str (k3-model.md §5) with Rust regex semantics: && intersection, Script=Han,
// \s = White_Space, (?i:'s) also matching 'ſ.
const WS = "\\t-\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";
const UP = "[[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]&&[^\\p{Script=Han}]]";
const LO = "[[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]&&[^\\p{Script=Han}]]";
const CT = "(?:'[sSſ]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?";
const k3re = new RegExp(
  [
    "[\\p{Script=Han}]+",
    `[^\\r\\n\\p{L}\\p{N}]?${UP}*${LO}+${CT}`,
    `[^\\r\\n\\p{L}\\p{N}]?${UP}+${LO}*${CT}`,
    "\\p{N}{1,3}",
    ` ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*`,
    `[${WS}]*[\\r\\n]+`,
    `[${WS}]+(?![^${WS}])`,
    `[${WS}]+`,
  ].join("|"),
  "gv",
);
{
  const { ranks, enc, dir } = vocabs["o200k_base"];
  const whole = new Tiktoken({ ...ranks, pat_str: "[\\s\\S]+", special_tokens: {} });
  const k3cases = [...cases, { name: "k3 contractions", text: "I'LL it'ſ DON'T we'RE" }];
  for (const c of k3cases) {
    const want = [];
    for (const m of c.text.matchAll(k3re)) want.push(...whole.encode(m[0], [], []));
    compare(`k3 pattern (o200k ranks) / ${c.name}`, enc, dir, "k3", c.text, want);
  }
}

await runQueued();
console.log(`${checked - failures} of ${checked} cases identical (${cases.length} texts; cl100k_base, o200k_base, K3 pattern) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
