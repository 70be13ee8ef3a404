#!/bin/bash
# How close the emulated box comes to N drives' worth of bandwidth: fio's aggregate
# (bench/fio.sh) on 1, 2, 4, 8 emulated drives (bench/emulate.sh), each throttled to the
# same MB/s, repeated; the drive counts alternate (1 2 4 8, then 8 4 2 1, ...) because
# this disk's speed drifts from one run to the next. Every run is kept; the summary is
# the median of the per-round ratios bw(N) / (N x bw(1)), and the fraction of N x the
# throttle reached. The box is torn down at the end, on error and on INT/TERM.
#
#   bench/fio-scaling.sh [--counts 1,2,4,8] [--repeats 3] [--mbps 100] [--size 2G]
#                        [--file-size 1G] [--bs 1M] [--iodepth 64] [--runtime 6]
#                        [--name fio-scaling] [--dir DIR] [--out FILE]
#
# Writes bench/results/fio-scaling-<UTC date>.json (the command, every knob, every run,
# the summary) and prints a table. Exit 77 where bench/emulate.sh cannot emulate.
set -euo pipefail
prog=fio-scaling.sh
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
# The command as typed, for the results file (quoted only where the shell needs it).
command_line=$(for a in "$0" "$@"; do
  if [[ $a =~ ^[A-Za-z0-9_./,:=@+-]+$ ]]; then printf '%s ' "$a"; else printf '%q ' "$a"; fi
done)

def_counts=1,2,4,8 def_repeats=3 def_mbps=100 def_size=2G def_file_size=1G def_bs=1M
def_iodepth=64 def_runtime=6 def_name=fio-scaling def_headroom=1
usage() {
  cat <<EOF
usage: bench/fio-scaling.sh [options]
options (default):
  --counts LIST    drive counts to measure; the first is the per-drive baseline ($def_counts)
  --repeats R      rounds; odd rounds run the counts in order, even ones reversed ($def_repeats)
  --mbps M         read limit per drive, MB/s, MB = 10^6 bytes ($def_mbps)
  --size SIZE      each emulated drive ($def_size)
  --file-size SIZE the file fio reads on each drive ($def_file_size)
  --bs SIZE        fio block size ($def_bs)
  --iodepth N      fio reads in flight per drive ($def_iodepth)
  --runtime S      seconds per fio run ($def_runtime)
  --name NAME      emulated box name ($def_name)
  --dir DIR        where the box lives (bench/emulate.sh's default)
  --out FILE       results (bench/results/fio-scaling-<UTC date>.json)
  --no-headroom    skip the unthrottled run on all drives that opens each round (run it)
EOF
}
usage_error() { echo "$prog: $*" >&2; echo "$prog: see bench/fio-scaling.sh --help" >&2; exit 2; }

counts=$def_counts repeats=$def_repeats mbps=$def_mbps size=$def_size file_size=$def_file_size
bs=$def_bs iodepth=$def_iodepth runtime=$def_runtime name=$def_name dir='' out=''
headroom=$def_headroom
while (($#)); do
  case $1 in
    --counts) need_value "$1" $#; counts=$2; shift 2 ;;
    --repeats) need_value "$1" $#; repeats=$2; shift 2 ;;
    --mbps) need_value "$1" $#; mbps=$2; shift 2 ;;
    --size) need_value "$1" $#; size=$2; shift 2 ;;
    --file-size) need_value "$1" $#; file_size=$2; shift 2 ;;
    --bs) need_value "$1" $#; bs=$2; shift 2 ;;
    --iodepth) need_value "$1" $#; iodepth=$2; shift 2 ;;
    --runtime) need_value "$1" $#; runtime=$2; shift 2 ;;
    --name) need_value "$1" $#; name=$2; shift 2 ;;
    --dir) need_value "$1" $#; dir=$2; shift 2 ;;
    --out) need_value "$1" $#; out=$2; shift 2 ;;
    --no-headroom) headroom=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage_error "unknown option '$1'" ;;
  esac
done
IFS=, read -r -a ns <<<"$counts"
for n in "${ns[@]}"; do check_uint --counts "$n"; done
check_uint --repeats "$repeats"
check_uint --mbps "$mbps"
max=$(printf '%s\n' "${ns[@]}" | sort -n | tail -1)
out=${out:-$here/results/fio-scaling-$(date -u +%Y%m%d-%H%M%S).json}

say "every knob:"
for k in counts repeats mbps size file_size bs iodepth runtime name headroom; do
  v=${!k} d=def_$k
  printf '%s:   --%-10s %s%s\n' "$prog" "${k//_/-}" "$v" "$([[ $v == "${!d}" ]] && echo " (default)")" >&2
done
printf '%s:   --%-10s %s\n' "$prog" dir "${dir:-emulate.sh default}" "$prog" out "$out" >&2

# ---- the box -------------------------------------------------------------------------

box=(--name "$name")
[[ -n $dir ]] && box+=(--dir "$dir")
teardown() { "$here/emulate.sh" down "${box[@]}" >&2 || true; }
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
rc=0
list=$("$here/emulate.sh" up "${box[@]}" --drives "$max" --size "$size" --mbps "$mbps") || rc=$?
if ((rc == 77)); then trap - EXIT; exit 77; fi
((rc == 0)) || die "bench/emulate.sh up failed (exit $rc)"
IFS=, read -r -a all <<<"$(tail -1 <<<"$list")"

# fio_bw N SECONDS [free]: aggregate bytes/s over the first N drives, inside the
# throttle, or with `free` outside it.
fio_bw() {
  local n=$1 drives cg=(--name "$name")
  [[ ${3:-} == free ]] && cg=()
  drives=$(IFS=,; echo "${all[*]:0:n}")
  "$here/fio.sh" --drives "$drives" --bs "$bs" --iodepth "$iodepth" --runtime "$2" \
    --size "$file_size" "${cg[@]}" 2>"$tmp_err" || { cat "$tmp_err" >&2; die "fio.sh on $n drives failed"; }
}
tmp_err=$(mktemp)
trap 'rm -f "$tmp_err"; teardown' EXIT

# Lays out every drive's file and lets the first-run effects pass; not counted.
say "warm-up on all $max drives (creates the files; not counted)"
fio_bw "$max" 2 >/dev/null

# ---- the runs ------------------------------------------------------------------------

# Each round opens with the same drives unthrottled (fio outside the cgroup): the
# headroom. The emulation holds only while N x the limit stays well below it; this
# disk's own ceiling moves between runs.
runs=()   # "round drives bw throttled"
free=()
for ((r = 1; r <= repeats; r++)); do
  if ((headroom)); then
    bw=$(fio_bw "$max" "$runtime" free)
    runs+=("$r $max $bw false")
    free+=("$bw")
    printf '%s: round %d, %d drive(s) unthrottled: %.1f MB/s (the cap, %d x %d MB/s, is %.2f of it)\n' \
      "$prog" "$r" "$max" "$(bc -l <<<"$bw / 1000000")" "$max" "$mbps" "$(bc -l <<<"$max * $mbps * 1000000 / $bw")" >&2
  fi
  order=("${ns[@]}")
  if ((r % 2 == 0)); then mapfile -t order < <(printf '%s\n' "${ns[@]}" | tac); fi
  for n in "${order[@]}"; do
    bw=$(fio_bw "$n" "$runtime")
    runs+=("$r $n $bw true")
    printf '%s: round %d, %d drive(s): %.1f MB/s (%.3f of %d x %d MB/s)\n' "$prog" "$r" "$n" \
      "$(bc -l <<<"$bw / 1000000")" "$(bc -l <<<"$bw / ($n * $mbps * 1000000)")" "$n" "$mbps" >&2
  done
done

# ---- the summary ---------------------------------------------------------------------

base=${ns[0]}
bw_of() { printf '%s\n' "${runs[@]}" | awk -v r="$1" -v n="$2" '$1 == r && $2 == n && $4 == "true" { print $3 }'; }
summary=() table=()
for n in "${ns[@]}"; do
  bws=() ratios=()
  for ((r = 1; r <= repeats; r++)); do
    b=$(bw_of "$r" "$n") one=$(bw_of "$r" "$base")
    bws+=("$b")
    ratios+=("$(printf '%.4f' "$(bc -l <<<"($b * $base) / ($n * $one)")")")
  done
  med_bw=$(printf '%s\n' "${bws[@]}" | median)
  med_ratio=$(printf '%s\n' "${ratios[@]}" | median)
  of_limit=$(bc -l <<<"scale=4; $med_bw / ($n * $mbps * 1000000)")
  summary+=("{\"drives\": $n, \"bw_bytes\": [$(IFS=,; echo "${bws[*]}")], \"median_bw_bytes\": $med_bw, \"ratio_to_n_x_base\": [$(IFS=,; echo "${ratios[*]}")], \"median_ratio_to_n_x_base\": $(printf '%.4f' "$med_ratio"), \"median_of_limit\": $(printf '%.4f' "$of_limit")}")
  table+=("$(printf '%7d  %-32s %9.1f  %-22s %7.3f  %7.3f' "$n" \
    "$(printf '%s\n' "${bws[@]}" | awk '{ printf "%s%.1f", (NR > 1 ? " " : ""), $1 / 1e6 }')" \
    "$(bc -l <<<"$med_bw / 1000000")" "$(printf '%s\n' "${ratios[@]}" | awk '{ printf "%s%.3f", (NR > 1 ? " " : ""), $1 }')" \
    "$med_ratio" "$of_limit")")
done

if ((headroom)); then
  free_med=$(printf '%s\n' "${free[@]}" | median)
  cap_share=$(bc -l <<<"$max * $mbps * 1000000 / $free_med")
fi
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
mkdir -p "$(dirname "$out")"
{
  printf '{"command": %s,\n "date": "%s", "kernel": "%s", "cores": %d,\n' "$(json_str "${command_line% }")" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -r)" "$(nproc)"
  printf ' "knobs": {"counts": [%s], "repeats": %d, "mbps": %d, "mb": 1000000, "size": "%s", "file_size": "%s", "bs": "%s", "iodepth": %d, "runtime_s": %d, "fio": "%s", "rw": "randread", "order": "odd rounds ascending, even rounds descending"},\n' \
    "$counts" "$repeats" "$mbps" "$size" "$file_size" "$bs" "$iodepth" "$runtime" "$(fio --version)"
  printf ' "runs": [%s],\n' "$(printf '%s\n' "${runs[@]}" | awk '{ printf "%s{\"round\": %d, \"drives\": %d, \"bw_bytes\": %s, \"throttled\": %s}", (NR > 1 ? ", " : ""), $1, $2, $3, $4 }')"
  printf ' "summary": [%s]' "$(IFS=,; echo "${summary[*]}")"
  if ((headroom)); then
    printf ',\n "unthrottled": {"drives": %d, "bw_bytes": [%s], "median_bw_bytes": %s, "cap_over_median": %.4f}' \
      "$max" "$(IFS=,; echo "${free[*]}")" "$free_med" "$cap_share"
  fi
  printf '}\n'
} >"$out"

printf '\n%7s  %-32s %9s  %-22s %7s  %7s\n' drives "MB/s, rounds 1..$repeats" median "bw(N)/(N x bw($base))" median "of cap"
printf '%s\n' "${table[@]}"
if ((headroom)); then
  printf '%s: unthrottled on %d drives: %s MB/s (median %.1f); the cap %d x %d MB/s is %.2f of it%s\n' \
    "$prog" "$max" "$(printf '%s\n' "${free[@]}" | awk '{ printf "%s%.1f", (NR > 1 ? " " : ""), $1 / 1e6 }')" \
    "$(bc -l <<<"$free_med / 1000000")" "$max" "$mbps" "$cap_share" \
    "$( (($(bc <<<"$cap_share > 0.7"))) && echo ": too close, lower --mbps")"
fi
echo "$prog: wrote $out"
