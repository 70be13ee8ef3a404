#!/bin/bash
# The expert cache's own work against its slot count: a synthetic model with K3's 896
# experts on 61 layers (53,760 records, full K3 has 82,432) at tiny widths, so a token's
# compute and reads are small and what is left is the cache's bookkeeping. Decode
# s/token at budgets that cache part or all of the records, beside --no-cache, in one
# run, alternating ROUNDS times (the medians); the bytes read a token say the runs made
# the same choices whatever the build.
# usage: bench/cache-slots.sh [--help]
# knobs (environment): K3 (./k3-uring), TOKENS (300), RAMS ("0.15G 0.2G 8G"), ROUNDS (3),
#   WORK (build/bench-cache-slots: the model and its pack, made once), OUT
#   (bench/results/cache-slots-DATE.txt)
set -euo pipefail
prog=cache-slots.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
if [[ ${1:-} == --help || ${1:-} == -h ]]; then sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
k3=$(realpath "${K3:-./k3-uring}")
tokens=${TOKENS:-300}
rams=${RAMS:-0.15G 0.2G 8G}
rounds=${ROUNDS:-3}
work=${WORK:-$root/build/bench-cache-slots}
out=${OUT:-$root/bench/results/cache-slots-$(date -u +%Y%m%d-%H%M%S).txt}
[[ -x $k3 ]] || die "no engine at $k3 (make, or K3=)"
check_uint TOKENS "$tokens"
check_uint ROUNDS "$rounds"
say "K3=$k3 TOKENS=$tokens RAMS=\"$rams\" ROUNDS=$rounds WORK=$work OUT=$out"

if [[ ! -f $work/d0/k3-uring.manifest ]]; then
  rm -rf "$work" && mkdir -p "$work/d0"
  full='[range(4; 62; 4)] + [61]'
  jq ".text_config |= (.num_hidden_layers = 61 | .num_experts = 896 |
        .num_experts_per_token = 16 | .linear_attn_config.full_attn_layers = ($full) |
        .linear_attn_config.kda_layers = ([range(1; 62)] - ($full)))" \
    "$root/tests/routes/k3-dsv2-tiny.json" >"$work/config.json" || die "making the config"
  "$k3" synth --config "$work/config.json" --seed 1 --out "$work/model" -q || die "synth"
  "$k3" pack --checkpoint "$work/model" --drives "$work/d0" -q || die "pack"
fi

# run LABEL ARGS...: one decode; "LABEL S_PER_TOKEN MB_PER_TOKEN READY_PCT" on stdout.
run() {
  local label=$1 stats
  shift
  stats=$("$k3" run --drives "$work/d0" -t 2 -p "Hello" -n "$tokens" --ignore-eos "$@" 2>&1 >/dev/null |
          decode_stats) || true
  [[ -n $stats ]] || die "$label: no statistics line"
  read -r spt _ mb ready <<<"$stats"
  echo "$label $spt $mb $ready"
}

labels=("no-cache" $rams)
declare -A times mb ready
for ((r = 0; r < rounds; r++)); do
  for label in "${labels[@]}"; do
    if [[ $label == no-cache ]]; then line=$(run "$label" --ram 8G --no-cache)
    else line=$(run "$label" --ram "$label"); fi
    read -r _ spt m p <<<"$line"
    times[$label]+="$spt "
    mb[$label]=$m ready[$label]=$p
  done
done
{
  echo "cache-slots.sh: $(git -C "$root" log -1 --format='commit %h' 2>/dev/null || echo 'no git'), $tokens tokens, medians of $rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%-10s %10s %10s %14s %8s\n' budget s/token "x no-cache" "MB read/token" ready%
  base=$(printf '%s\n' ${times[no-cache]} | median)
  for label in "${labels[@]}"; do
    t=$(printf '%s\n' ${times[$label]} | median)
    printf '%-10s %10s %10s %14s %8s\n' "$label" "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.2f", a / b }')" \
      "${mb[$label]}" "${ready[$label]}"
  done
} | tee "$out"
say "wrote $out"
