#!/bin/bash
# One model over mpirun's ranks: `run` on 2 and 3 ranks, from a checkpoint folder (every
# rank reading its share of the same shards), from a whole pack and from a pack per rank
# holding its share (pack --ranks), gives logits and ids
# byte-identical to one process, prompt steps of many rows and decode steps alike; each
# rank reads only its share of the experts, dealt out evenly when every rank holds every
# expert, by owner otherwise; the trace holds every rank's tracks.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ranks_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/ranks-run"
rm -rf "$d" && mkdir -p "$d/a" "$d/b" "$d"/s{0,1,2}-{a,b}
"$K3" pack -m "$m" --drives "$d/a,$d/b" -q || exit 1
"$K3" pack -m "$m" --drives "$d/s%r-a,$d/s%r-b" --ranks 3 -q || exit 1 # a pack per rank
ids=$(seq -s, 7 41 1650)   # 40 ids: a prompt step of 32 rows, then one of 8
common=(--ids "$ids" -n 6 --print-ids -t 1 -q)

"$K3" run -m "$m" "${common[@]}" --logits-out "$d/one.f32" >"$d/one.ids" || exit 1
same() { # NAME NP ARGS...: the ranks' ids and logits are one process's
  local name=$1 np=$2; shift 2
  if ! ranks "$np" "$K3" run "${common[@]}" --logits-out "$d/$name.f32" "$@" >"$d/$name.ids" 2>"$d/$name.err"; then
    fail "$name: exited non-zero: $(cat "$d/$name.err")"
  elif ! cmp -s "$d/one.f32" "$d/$name.f32" || ! cmp -s "$d/one.ids" "$d/$name.ids"; then
    fail "$name: logits or ids differ from one process's"
  else
    echo "ok: $name: $(cat "$d/$name.ids")"
  fi
}
same ckpt-2 2 -m "$m"
# Ranks on one box share its memory: --ram auto gives each an equal part, and says so.
ranks 2 "$K3" run "${common[@]}" -m "$m" -v >/dev/null 2>"$d/auto.err" || fail "auto on 2 ranks: $(cat "$d/auto.err")"
grep -q -- "--ram auto: .* / 2 ranks on this box less" "$d/auto.err" &&
  echo "ok: $(grep -- '--ram auto' "$d/auto.err" | sed 's/k3-uring: //')" ||
  fail "2 ranks on one box: no \"/ 2 ranks on this box\" in: $(cat "$d/auto.err")"
same ckpt-3 3 -m "$m"
same pack-2 2 --drives "$d/a,$d/b"
same pack-3-floor 3 --drives "$d/a,$d/b" --ram floor --no-cache
same pack-3-sync 3 --drives "$d/b,$d/a" --sync
same shares-3 3 --drives "$d/s%r-a,$d/s%r-b" --ram floor
ranks 2 "$K3" run --drives "$d/s%r-a,$d/s%r-b" "${common[@]}" >"$d/wrong.ids" 2>"$d/wrong.err" &&
  fail "2 ranks ran on packs of 3 ranks' shares"
grep -q "^k3-uring: rank 0: .*s0-a/k3-uring.manifest holds rank 0 of 3's experts; this process is rank 0 of 2" \
  "$d/wrong.err" && echo "ok: shares of 3 refused by 2 ranks" || fail "shares of 3 on 2 ranks: $(cat "$d/wrong.err")"

# Each rank reads its share: rank 0 of 2 reads well under one process's expert bytes.
read_mb() { sed -n 's/.* \([0-9.]*\) MB read per token.*/\1/p' "$1"; }
"$K3" run --drives "$d/a,$d/b" --ids 5,6,7 -n 12 -t 1 --no-cache 2>"$d/one.stats" >/dev/null
ranks 2 "$K3" run --drives "$d/a,$d/b" --ids 5,6,7 -n 12 -t 1 --no-cache 2>"$d/two.stats" >/dev/null
one=$(read_mb "$d/one.stats") two=$(read_mb "$d/two.stats")
if [[ -z "$one" || -z "$two" ]] || ! awk -v a="$one" -v b="$two" 'BEGIN { exit !(b < 0.7 * a) }'; then
  fail "rank 0 of 2 read $two MB a token, one process $one: not its share"
else
  echo "ok: MB read per token: one process $one, rank 0 of 2 $two"
fi
grep -q "2 ranks, experts dealt out evenly; per token: [0-9.]* KB of expert outputs sent between ranks" "$d/two.stats" ||
  fail "whole packs, the trunk resident: no line of experts dealt and what crossed: $(cat "$d/two.stats")"
ranks 3 "$K3" run --drives "$d/s%r-a,$d/s%r-b" --ids 5,6,7 -n 4 -t 1 2>&1 >/dev/null |
  grep -q "3 ranks, experts by owner (e mod ranks)" && echo "ok: packs of shares: experts by owner" ||
  fail "packs of shares: experts not by owner"

# One trace file with a process per rank, each with its exchanges and routed experts.
ranks 2 "$K3" run -m "$m" --ids 5,6,7 -n 3 -t 1 -q --trace "$d/trace.json" >/dev/null ||
  fail "traced run failed"
jq -e '[.traceEvents[] | select(.name == "process_name") | .args.name] == ["k3-uring rank 0", "k3-uring rank 1"]
       and ([.traceEvents[] | select(.name == "exchange" and .ph == "B") | .pid] | unique) == [1, 2]
       and ([.traceEvents[] | select(.name == "expert") | .pid] | unique) == [1, 2]' \
  "$d/trace.json" >/dev/null && echo "ok: the trace has both ranks' tracks" ||
  fail "the trace lacks a rank's process, exchanges or experts"
finish
