#!/bin/bash
# Decode off one packed drive, cold and warm, at three budgets and --no-cache, each run in
# a fresh memory cgroup with the page cache dropped first: s/token over the generated
# tokens, MB read a token, the engine's read rate beside fio's best on the same data file
# in the same run, and the seconds the read area spent faulting fresh memory in on the
# reads' way. "cold" is a label's first run, "warm" the same again at once (the host still
# backs the memory the first one freed: under a hypervisor that backs guest memory lazily,
# the first touch costs far more than a later one). One table (stdout and OUT.txt), one
# plot (OUT.png).
# usage: bench/decode.sh [DRIVES] [--help]   (a pack's drive folders, D0,D1,..; default: CKPT
#   packed on one drive in DATA/prefill/d0, made once and kept, as bench/prefill.sh's)
# knobs (environment): K3 (./k3-uring), RAMS ("2.5G 5G auto"), TOKENS (16), IDS
#   (1,2,3,4: the prompt), THREADS (2), MEM (6G: the cgroup's limit), K3_BASE (an engine
#   run beside K3, each label alternating, labelled "base:"), FIO_BS ("1M 4M"), FIO_DEPTHS
#   ("8 32"), FIO_SECONDS (3), OUT (bench/results/decode-DATE)
set -euo pipefail
prog=decode.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
if [[ ${1:-} == --help || ${1:-} == -h ]]; then sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
drives=${1:-$bench_data/prefill/d0}
k3=$(realpath "${K3:-./k3-uring}")
base_k3=${K3_BASE:+$(realpath "$K3_BASE")}
rams=${RAMS:-2.5G 5G auto}
tokens=${TOKENS:-16}
ids=${IDS:-1,2,3,4}
threads=${THREADS:-2}
mem=${MEM:-6G}
fio_bs=${FIO_BS:-1M 4M}
fio_depths=${FIO_DEPTHS:-8 32}
fio_seconds=${FIO_SECONDS:-3}
out=${OUT:-${BENCH_RESULTS:-$root/bench/results}/decode-$(date -u +%Y%m%d-%H%M%S)}
[[ -x $k3 ]] || die "no engine at $k3 (make, or K3=)"
[[ -z $base_k3 || -x $base_k3 ]] || die "K3_BASE: no engine at $base_k3"
check_uint TOKENS "$tokens"
[[ $(id -u) == 0 ]] || die "needs root (memory cgroup, dropping the page cache)"
cg_root=/sys/fs/cgroup/memory
[[ -d $cg_root ]] || die "no cgroup v1 memory hierarchy at $cg_root"
if [[ -z ${1:-} && ! -f $drives/k3-uring.manifest ]]; then
  ckpt=${CKPT:-$bench_data/k3-bench}
  [[ -f $ckpt/config.json ]] || die "no checkpoint at $ckpt to pack (CKPT=, or give DRIVES)"
  say "packing $ckpt onto $drives (kept for the next run)"
  mkdir -p "$drives" && "$k3" pack --checkpoint "$ckpt" --drives "$drives" -q || die "pack"
fi
say "K3=$k3 K3_BASE=${base_k3:-none} DRIVES=$drives RAMS=\"$rams\" TOKENS=$tokens IDS=$ids THREADS=$threads MEM=$mem FIO_BS=\"$fio_bs\" FIO_DEPTHS=\"$fio_depths\" FIO_SECONDS=$fio_seconds OUT=$out"

cg=$cg_root/k3-decode-$$
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# fio's best MB/s over FIO_BS x FIO_DEPTHS, random O_DIRECT reads of the first drive's data.
fio_best() {
  local best=0 bs depth mbps
  for bs in $fio_bs; do
    for depth in $fio_depths; do
      drop_caches
      mbps=$(fio --name=x --filename="${drives%%,*}/k3-uring.data" --readonly --rw=randread --bs="$bs" \
               --iodepth="$depth" --direct=1 --ioengine=io_uring --runtime="$fio_seconds" --time_based \
               --output-format=json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e6))')
      say "fio bs=$bs depth=$depth: $mbps MB/s"
      ((mbps > best)) && best=$mbps
    done
  done
  echo "$best"
}

# one ENGINE ARGS...: a decode in a fresh cgroup, page cache dropped; prints
# "S_PER_TOKEN MB_PER_TOKEN AREA_TAKE_S FIRST_TOKEN_S".
one() {
  local engine=$1 err
  shift
  drop_caches
  mkdir "$cg"
  echo "$mem" >"$cg/memory.limit_in_bytes"
  err=$(sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$cg" "$engine" run --drives "$drives" \
          --ids "$ids" -n "$tokens" --ignore-eos -t "$threads" --stats "$@" 2>&1 >/dev/null) || true
  rmdir "$cg"
  local stats area first
  stats=$(decode_stats <<<"$err")
  [[ -n $stats ]] || die "$engine $*: no statistics line: $(tail -1 <<<"$err")"
  area=$(sed -n 's/.*read area: [0-9.]* MB taken as reads reached it, in \([0-9.]*\) s.*/\1/p' <<<"$err")
  first=$(sed -n 's/.* token 1: \([0-9.]*\) s,.*/\1/p' <<<"$err")
  read -r spt _ mb _ <<<"$stats"
  echo "$spt $mb ${area:-0} ${first:-0}"
}

fio_mbps=$(fio_best)
labels=()
for ram in no-cache $rams; do
  labels+=("$ram")
  [[ -n $base_k3 ]] && labels+=("base:$ram")
done
rows=()
for label in "${labels[@]}"; do
  engine=$k3 ram=${label#base:}
  [[ $label == base:* ]] && engine=$base_k3
  args=(--ram "$ram")
  [[ $ram == no-cache ]] && args=(--ram 5G --no-cache)
  for state in cold warm; do
    read -r spt mb area first <<<"$(one "$engine" "${args[@]}")"
    say "$label $state: $spt s/token, $mb MB/token, area faulted on the reads' way $area s, token 1 $first s"
    rows+=("$label $state $spt $mb $area $first")
  done
done
fio_after=$(fio_best)
mkdir -p "$(dirname "$out")"
{
  echo "decode.sh: $(git -C "$root" log -1 --format='commit %h' 2>/dev/null || echo 'no git')${base_k3:+ (base: $base_k3)}, $drives, $tokens tokens after ids $ids, $threads threads, cgroup $mem, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "fio's best (bs $fio_bs, depths $fio_depths): $fio_mbps MB/s before the runs, $fio_after after"
  printf '%-14s %-5s %9s %8s %10s %9s %7s %8s %8s\n' budget state s/token x_nocache "MB/token" "MB/s" x_fio area_s token1_s
  nocache_cold=$(awk '$1 == "no-cache" && $2 == "cold" { print $3 }' <<<"$(printf '%s\n' "${rows[@]}")")
  nocache_warm=$(awk '$1 == "no-cache" && $2 == "warm" { print $3 }' <<<"$(printf '%s\n' "${rows[@]}")")
  for r in "${rows[@]}"; do
    read -r label state spt mb area first <<<"$r"
    ref=$nocache_cold && [[ $state == warm ]] && ref=$nocache_warm
    awk -v l="$label" -v s="$state" -v t="$spt" -v m="$mb" -v a="$area" -v f="$first" -v n="$ref" \
        -v fio="$fio_mbps" 'BEGIN { r = m / t; printf "%-14s %-5s %9.4f %8.2f %10.1f %9.0f %7.2f %8.2f %8.3f\n",
        l, s, t, t / n, m, r, r / fio, a, f }'
  done
} | tee "$out.txt"
awk 'NR > 3 { print NR - 3, $1 "/" $2, $3 }' "$out.txt" >"$out.dat"
gnuplot <<EOF || say "no plot (gnuplot failed)"
set terminal pngcairo size 900,500
set output "$out.png"
set title "decode s/token, cold and warm (page cache dropped, cgroup $mem)"
set style data histograms
set style fill solid 0.6
set xtics rotate by -30
set ylabel "s/token"
plot "$out.dat" using 3:xtic(2) notitle
EOF
say "wrote $out.txt${fio_mbps:+, $out.png}"
