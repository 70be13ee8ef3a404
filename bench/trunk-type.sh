#!/bin/bash
# The error of --trunk-type q8_0 against the bf16 trunk, per model: the same prompt run
# greedily for N tokens with each type (how many of the N tokens agree, and where they
# first part), then the bf16 run's whole sequence fed to both (teacher-forced: every
# position sees the same context) for every position's logits: max |dlogit| / max |logit|
# (over all positions and the vocabulary), the KL divergence of the next-token
# distribution KL(p_bf16 || p_q8) (mean and max over positions) and top-1 agreement.
# Synthetic checkpoints have random weights: these numbers bound the numerical error of
# Q8_0 on such weights; they say nothing of a trained model's quality.  How much such a
# model amplifies any small error is shown beside them: the same figures for bf16 with
# the routed experts' activations in int8 (K3_MXFP4_ACT=q8, a perturbation of about the
# same size as Q8_0's, in other matrices).
# usage: bench/trunk-type.sh [--tokens N] [DIR...]
#   DIR: checkpoint folders (-m); none: k3-tiny synthesized (seed 1) in a temporary folder.
#   K3 (environment): the engine to run (default: build/rel/k3-uring, built first).
# Writes bench/results/trunk-type-<date>.json (every figure, the commands) and .txt (the
# table), and prints the table.
set -euo pipefail
prog=trunk-type.sh
root=$(cd "$(dirname "$0")/.." && pwd)
k3=${K3:-}
tokens=64
prompt=5,17,300,1200,42,7,999,2031
dirs=()
while (($#)); do
  case $1 in
    --tokens) tokens=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
if [[ -z $k3 ]]; then
  make -C "$root" --no-print-directory build/rel/k3-uring >&2
  k3="$root/build/rel/k3-uring"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ((${#dirs[@]} == 0)); then
  "$k3" synth --config k3-tiny --seed 1 --out "$tmp/k3-tiny" -q
  dirs=("$tmp/k3-tiny")
fi
stamp=$(date -u +%Y%m%d-%H%M%S)
out="$root/bench/results/trunk-type-$stamp"
mkdir -p "$root/bench/results"
rows=()
for dir in "${dirs[@]}"; do
  name=$(basename "$dir")
  w="$tmp/$name"
  mkdir -p "$w"
  run=("$k3" run -m "$dir" -q --ignore-eos)
  # variant name: its environment and trunk type
  variants=("bf16:-:bf16" "q8_0:-:q8_0" "act-int8:K3_MXFP4_ACT=q8:bf16")
  for v in "${variants[@]}"; do
    IFS=: read -r tt env trunk <<<"$v"
    envs=() && [[ $env != - ]] && envs=("$env")
    env "${envs[@]}" "${run[@]}" --trunk-type "$trunk" --ids $prompt -n "$tokens" \
      --print-ids >"$w/$tt.ids"
  done
  forced="$prompt,$(tr -d '\n' <"$w/bf16.ids")"
  for v in "${variants[@]}"; do
    IFS=: read -r tt env trunk <<<"$v"
    envs=() && [[ $env != - ]] && envs=("$env")
    start=$(date +%s.%N)
    env "${envs[@]}" "${run[@]}" --trunk-type "$trunk" --ids "$forced" -n 1 \
      --logits-out "$w/$tt.f32" >/dev/null
    echo "$(date +%s.%N) - $start" | bc >"$w/$tt.seconds"
  done
  vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$dir/config.json" | head -1)
  for against in q8_0 act-int8; do
  rows+=("$(python3 - "$w" "$name" "$vocab" "$tokens" "$against" <<'PY'
import array, json, math, sys
w, name, vocab, n, against = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def load(tt):
    a = array.array('f')
    with open(f"{w}/{tt}.f32", 'rb') as f:
        a.frombytes(f.read())
    return a
b, q = load('bf16'), load(against)
ids = [open(f"{w}/{t}.ids").read().strip().split(',') for t in ('bf16', against)]
agree = sum(x == y for x, y in zip(*ids))
first = next((i for i, (x, y) in enumerate(zip(*ids)) if x != y), n)
pos = len(b) // vocab
maxd = maxl = 0.0
kls, top = [], 0
for p in range(pos):
    rb, rq = b[p * vocab:(p + 1) * vocab], q[p * vocab:(p + 1) * vocab]
    maxd = max(maxd, max(abs(x - y) for x, y in zip(rb, rq)))
    maxl = max(maxl, max(abs(x) for x in rb))
    mb, mq = max(rb), max(rq)
    lb = mb + math.log(sum(math.exp(x - mb) for x in rb))
    lq = mq + math.log(sum(math.exp(x - mq) for x in rq))
    kls.append(sum(math.exp(x - lb) * ((x - lb) - (y - lq)) for x, y in zip(rb, rq)))
    top += max(range(vocab), key=rb.__getitem__) == max(range(vocab), key=rq.__getitem__)
secs = {t: float(open(f"{w}/{t}.seconds").read()) for t in ('bf16', against)}
print(json.dumps({"model": name, "against_bf16": against, "vocab": vocab, "greedy_tokens": n, "greedy_agree": agree,
                  "greedy_first_difference": first, "positions": pos,
                  "max_abs_dlogit": maxd, "max_abs_logit": maxl, "rel_max_dlogit": maxd / maxl,
                  "kl_mean": sum(kls) / pos, "kl_max": max(kls), "top1_agree": top,
                  "forced_run_seconds": secs}))
PY
)")
  done
done
{
  echo "{\"source\": \"bench/trunk-type.sh --tokens $tokens ${dirs[*]}\", \"prompt\": \"$prompt\","
  echo " \"note\": \"synthetic random weights: an upper bound on Q8_0's numerical error on such weights, not a quality claim; act-int8 (K3_MXFP4_ACT=q8, bf16 trunk) shows how much the same model amplifies a perturbation of similar size\","
  echo " \"models\": ["
  sep=""
  for r in "${rows[@]}"; do echo "$sep  $r"; sep=","; done
  echo " ]}"
} >"$out.json"
python3 - "$out.json" <<'PY' | tee "$out.txt"
import json, sys
d = json.load(open(sys.argv[1]))
print(f"against bf16 ({d['note']}); {d['source']}")
print(f"{'model':<12} {'against':<9} {'greedy agree':>13} {'1st diff':>8} {'max|dlogit|/max|logit|':>23} "
      f"{'KL mean':>10} {'KL max':>10} {'top-1 (forced)':>15}")
for m in d["models"]:
    print(f"{m['model']:<12} {m['against_bf16']:<9} {m['greedy_agree']:>6} of {m['greedy_tokens']:<4} "
          f"{m['greedy_first_difference']:>8} {m['rel_max_dlogit']:>23.4g} {m['kl_mean']:>10.3g} "
          f"{m['kl_max']:>10.3g} {m['top1_agree']:>7} of {m['positions']:<5}")
PY
echo "$prog: wrote $out.json and $out.txt" >&2
