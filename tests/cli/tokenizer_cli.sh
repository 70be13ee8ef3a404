#!/bin/bash
# `k3-uring tokenize` on the synthetic k3-tiny model: --help lists the option table,
# encode/decode round-trip bytes exactly (-p, -f, stdin), --special switches special
# matching, usage errors exit 2 and runtime errors exit 1, each with one stderr line.
set -u
: "${K3:?}" "${K3_TEST_TMP:?}"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The k3-tiny seed-1 checkpoint, shared with the other CLI tests of a run.
model="$K3_TEST_TMP/k3-tiny-seed1"
[[ -d "$model" ]] || "$K3" synth --config k3-tiny --seed 1 --out "$model" -q || exit 1
tmp="$K3_TEST_TMP/tokenizer_cli"
rm -rf "$tmp" && mkdir -p "$tmp"

# expect CODE NEEDLE CMD...: exit status CODE, one stderr line containing NEEDLE,
# nothing on stdout.
expect() {
  local code=$1 needle=$2 out err rc
  shift 2
  out=$("$@" 2>"$tmp/err") && rc=0 || rc=$?
  err=$(cat "$tmp/err")
  if [[ $rc -ne $code ]]; then fail "$* exited $rc, want $code ($err)"
  elif [[ $(printf '%s\n' "$err" | wc -l) -ne 1 || "$err" != *"$needle"* ]]; then
    fail "$*: stderr \"$err\" is not one line with \"$needle\""
  elif [[ -n "$out" ]]; then fail "$*: printed \"$out\" on stdout"
  fi
}

# --help comes from the option table: every option is listed.
help=$("$K3" tokenize --help) || fail "--help exited $?"
for opt in --model --pattern --vocab-size --no-specials --special --prompt --file --decode --show --chat \
    --segments --ids --help; do
  [[ "$help" == *"$opt"* ]] || fail "--help does not list $opt"
done

# Round trips: the decoded bytes are the input bytes.
text=$'Hello, World! I\'LL see you at 10:30 \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87\xe3\x80\x81 caf\xc3\xa9'
ids=$("$K3" tokenize -m "$model" -p "$text") || fail "encode -p exited $?"
[[ "$ids" =~ ^[0-9]+(,[0-9]+)*$ ]] || fail "encode output \"$ids\" is not comma-separated ids"
"$K3" tokenize -m "$model" --decode "$ids" >"$tmp/dec" || fail "decode exited $?"
printf '%s' "$text" | cmp -s - "$tmp/dec" || fail "-p text does not round-trip"

printf 'line one\r\nline two\n\n\ttabbed   \n' >"$tmp/in.txt"
ids=$("$K3" tokenize -m "$model" -f "$tmp/in.txt") || fail "encode -f exited $?"
"$K3" tokenize -m "$model" --decode "$ids" | cmp -s - "$tmp/in.txt" || fail "-f file does not round-trip"
ids2=$("$K3" tokenize -m "$model" -f - <"$tmp/in.txt") || fail "encode -f - exited $?"
[[ "$ids2" == "$ids" ]] || fail "stdin gives $ids2, the file gives $ids"

# Specials: one id each in template text, plain text otherwise.
[[ $("$K3" tokenize -m "$model" --special -p '<|open|>') == 2035 ]] || fail "--special <|open|> is not 2035"
plain=$("$K3" tokenize -m "$model" -p '<|open|>')
[[ "$plain" == *,* && ",$plain," != *,2035,* ]] || fail "<|open|> as user text gave \"$plain\""
[[ $("$K3" tokenize -m "$model" --decode 2035,2037) == '<|open|><|sep|>' ]] || fail "decode of specials"
"$K3" tokenize -m "$model" --special -p '<|open|>hi' --show | grep -q $'^2035\t'"'<|open|>'"$'\tspecial$' ||
  fail "--show does not mark the special"

# Other pre-tokenizers run on the same vocabulary.
for p in cl100k o200k '(?s).+'; do
  ids=$("$K3" tokenize -m "$model" --pattern "$p" -p "$text") || fail "--pattern $p exited $?"
  [[ $("$K3" tokenize -m "$model" --decode "$ids") == "$text" ]] || fail "--pattern $p does not round-trip"
done

# Usage errors: exit 2.
expect 2 "-m DIR is required" "$K3" tokenize -p hi
expect 2 "exactly one of" "$K3" tokenize -m "$model"
expect 2 "exactly one of" "$K3" tokenize -m "$model" -p hi --decode 1
expect 2 "--frobnicate: unknown option" "$K3" tokenize -m "$model" --frobnicate -p hi
expect 2 "--model: needs a value" "$K3" tokenize --model
expect 2 "bad id" "$K3" tokenize -m "$model" --decode 1,x
expect 2 "--vocab-size" "$K3" tokenize -m "$model" --vocab-size 0 -p hi
expect 2 "--pattern: missing closing parenthesis" "$K3" tokenize -m "$model" --pattern '(' -p hi

# Runtime errors: exit 1, naming what is wrong.
expect 1 "$tmp/nope/" "$K3" tokenize -m "$tmp/nope" --vocab-size 10 -p hi
printf 'ok\xffno' >"$tmp/bad.txt"
expect 1 "invalid UTF-8 at byte offset 2" "$K3" tokenize -m "$model" -f "$tmp/bad.txt"
expect 1 "id 4096" "$K3" tokenize -m "$model" --decode 1,4096
expect 1 "$tmp/missing.txt" "$K3" tokenize -m "$model" -f "$tmp/missing.txt"
expect 1 "id \"2040\"" "$K3" tokenize -m "$model" --vocab-size 2040 -p hi

((failures == 0)) && echo "tokenizer CLI: all checks passed"
((failures == 0))
