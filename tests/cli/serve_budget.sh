#!/bin/bash
# serve's RAM budget holds every sequence: `serve --parallel 8` over a pack plans the
# same floor and budget, to the byte, as `plan --parallel 8`; a --ram that holds one
# sequence but not eight is refused with the floor named, and serves --parallel 1.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/serve-budget"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q || fail "pack"
plan_floor() { # PARALLEL: the floor in bytes
  "$K3" plan --config "$m/config.json" --drives 2 --ram floor --ctx 256 --threads 2 --parallel "$1" |
    sed -n 's/.*(floor [0-9.]* GiB = \([0-9]*\) B.*/\1/p'
}
one=$(plan_floor 1) eight=$(plan_floor 8)
((eight > one)) || fail "plan: the floor of 8 sequences ($eight B) is not above one's ($one B)"
between=$(( (one + eight) / 2 ))

expect_error 1 "below the floor of" "$K3" serve --drives "$d/a,$d/b" --parallel 8 --ctx-size 256 \
  -t 2 --ram "$between" --port 0

# The budget block serve -v prints is plan's, to the byte.
"$K3" plan --config "$m/config.json" --drives 2 --ram floor --ctx 256 --threads 2 --parallel 8 \
  >"$d/plan.out" || fail "plan"
start_server serve-budget --drives "$d/a,$d/b" --parallel 8 --ctx-size 256 -t 2 --ram floor -v
stop_server TERM
block() { sed -n 's/^.*\(budget [0-9.]* GiB = \)/\1/; /^budget /,/expert cache/p' "$1"; }
block "$d/plan.out" >"$d/plan.block"
block "$LOG" >"$d/serve.block"
[[ -s "$d/plan.block" ]] && cmp -s "$d/plan.block" "$d/serve.block" ||
  fail "plan --parallel 8 and serve --parallel 8 disagree: $(diff "$d/plan.block" "$d/serve.block")"

start_server serve-budget-one --drives "$d/a,$d/b" --parallel 1 --ctx-size 256 -t 2 --ram "$between"
post /v1/completions '{"prompt": [5, 17], "max_tokens": 2}'
[[ $STATUS == 200 ]] || fail "--parallel 1 within --ram $between: $STATUS $BODY"
stop_server TERM
finish
