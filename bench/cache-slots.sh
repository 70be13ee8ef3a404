#!/bin/bash
# The expert cache's own work against its slot count: a synthetic model with K3's 896
# experts on K3's 93 layers (92 MoE: 82,432 records, as full K3) at tiny widths, so a
# token's compute and reads are small and what is left is the cache's bookkeeping. Decode
# s/token at budgets that cache part or all of the records, beside --no-cache, in one
# run, alternating ROUNDS times (the medians); prediction off, so the records a run reads
# (summed over its tokens) say whether two builds made the same choices.
# usage: bench/cache-slots.sh [--help]
# knobs (environment): K3 (./k3-uring), TOKENS (300), RAMS ("0.15G 0.25G 8G"), ROUNDS (3),
#   LAYERS (93; 61 gives the 53,760 records of the first runs), K3_BASE (an engine to run
#   beside K3, alternating, labelled "base": before against after in one run), WORK
#   (build/bench-cache-slots-LAYERS: the model and its pack, made once), OUT
#   (bench/results/cache-slots-DATE.txt)
set -euo pipefail
prog=cache-slots.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
if [[ ${1:-} == --help || ${1:-} == -h ]]; then sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
k3=$(realpath "${K3:-./k3-uring}")
tokens=${TOKENS:-300}
rams=${RAMS:-0.15G 0.25G 8G}
rounds=${ROUNDS:-3}
layers=${LAYERS:-93}
base_k3=${K3_BASE:+$(realpath "$K3_BASE")}
work=${WORK:-$root/build/bench-cache-slots-$layers}
out=${OUT:-$root/bench/results/cache-slots-$(date -u +%Y%m%d-%H%M%S).txt}
[[ -x $k3 ]] || die "no engine at $k3 (make, or K3=)"
check_uint TOKENS "$tokens"
check_uint ROUNDS "$rounds"
check_uint LAYERS "$layers"
[[ -z $base_k3 || -x $base_k3 ]] || die "K3_BASE: no engine at $base_k3"
say "K3=$k3 K3_BASE=${base_k3:-none} TOKENS=$tokens RAMS=\"$rams\" ROUNDS=$rounds LAYERS=$layers WORK=$work OUT=$out"

if [[ ! -f $work/d0/k3-uring.manifest ]]; then
  rm -rf "$work" && mkdir -p "$work/d0"
  full="[range(4; $((layers + 1)); 4)] + [$layers]"
  jq ".text_config |= (.num_hidden_layers = $layers | .num_experts = 896 |
        .num_experts_per_token = 16 | .linear_attn_config.full_attn_layers = ($full | unique) |
        .linear_attn_config.kda_layers = ([range(1; $((layers + 1)))] - ($full)))" \
    "$root/tests/routes/k3-dsv2-tiny.json" >"$work/config.json" || die "making the config"
  "$k3" synth --config "$work/config.json" --seed 1 --out "$work/model" -q || die "synth"
  "$k3" pack --checkpoint "$work/model" --drives "$work/d0" -q || die "pack"
fi

# run ENGINE LABEL ARGS...: one decode, prediction off and the cache filled as reads
# reach it (guesses land, and memory is faulted in ahead, as time allows: the records
# read would depend on timing); "LABEL S_PER_TOKEN MB_PER_TOKEN READY_PCT
# RECORDS_READ" on stdout.
run() {
  local engine=$1 label=$2 err stats
  shift 2
  err=$("$engine" run --drives "$work/d0" -t 2 -p "Hello" -n "$tokens" --ignore-eos --predict off \
        --cache-fill reads --stats "$@" 2>&1 >/dev/null) || true
  stats=$(decode_stats <<<"$err")
  [[ -n $stats ]] || die "$label: no statistics line"
  read -r spt _ mb ready <<<"$stats"
  echo "$label $spt $mb $ready $(decode_records_read <<<"$err")"
}

labels=("no-cache" $rams)
[[ -n $base_k3 ]] && for ram in $rams; do labels+=("base:$ram"); done
declare -A times mb ready records
for ((r = 0; r < rounds; r++)); do
  for label in "${labels[@]}"; do
    if [[ $label == no-cache ]]; then line=$(run "$k3" "$label" --ram 8G --no-cache)
    elif [[ $label == base:* ]]; then line=$(run "$base_k3" "$label" --ram "${label#base:}")
    else line=$(run "$k3" "$label" --ram "$label"); fi
    read -r _ spt m p n <<<"$line"
    times[$label]+="$spt "
    mb[$label]=$m ready[$label]=$p records[$label]=$n
  done
done
{
  echo "cache-slots.sh: $(git -C "$root" log -1 --format='commit %h' 2>/dev/null || echo 'no git')${base_k3:+ (base: $base_k3)}, $layers layers ($(( (layers - 1) * 896 )) records), $tokens tokens, medians of $rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%-10s %10s %10s %14s %8s %13s\n' budget s/token "x no-cache" "MB read/token" ready% "records read"
  base=$(printf '%s\n' ${times[no-cache]} | median)
  for label in "${labels[@]}"; do
    t=$(printf '%s\n' ${times[$label]} | median | xargs printf '%.4f')
    printf '%-10s %10s %10s %14s %8s %13s\n' "$label" "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.2f", a / b }')" \
      "${mb[$label]}" "${ready[$label]}" "${records[$label]}"
  done
} | tee "$out"
say "wrote $out"
