#!/bin/bash
# Pack throughput against cp of the same bytes on the same disk, alternating the two
# (this disk's speed drifts between runs), page cache dropped before each run.
# usage: bench/pack.sh CHECKPOINT WORKDIR [DRIVES] [ROUNDS]
#   CHECKPOINT  a checkpoint folder (e.g. from: k3-uring synth --config k3-bench)
#   WORKDIR     scratch space on the disk under test (needs 2x the checkpoint size)
#   DRIVES      drive folders to pack onto, all in WORKDIR (default 3)
#   ROUNDS      pack/cp pairs (default 2)
# Writes bench/results/pack-<date>.json and prints a table.
set -euo pipefail
ckpt=${1:?usage: bench/pack.sh CHECKPOINT WORKDIR [DRIVES] [ROUNDS]}
work=${2:?usage: bench/pack.sh CHECKPOINT WORKDIR [DRIVES] [ROUNDS]}
drives=${3:-3}
rounds=${4:-2}
k3=${K3:-./k3-uring}
root=$(cd "$(dirname "$0")/.." && pwd)
prog=pack.sh
source "$root/bench/lib.sh"
out="$root/bench/results/pack-$(date -u +%Y%m%d-%H%M%S).json"
bytes=$(du -sb "$ckpt" | cut -f1)
echo "pack.sh: checkpoint $ckpt ($((bytes / 1000000)) MB), $drives drives in $work, $rounds rounds"

# Runs a command under /usr/bin/time; prints "seconds max_rss_kb".
timed() {
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" >/dev/null 2>"$work/stderr.txt" ||
    { cat "$work/stderr.txt" >&2; exit 1; }
  cat "$work/time.txt"
}

mkdir -p "$work"
results=()
for r in $(seq 1 "$rounds"); do
  rm -rf "$work/drives" "$work/copy"
  list=$(for i in $(seq 1 "$drives"); do mkdir -p "$work/drives/d$i"; echo "$work/drives/d$i"; done | paste -sd,)
  drop_caches
  read -r ps prss < <(timed "$k3" pack --checkpoint "$ckpt" --drives "$list" -q)
  rm -rf "$work/drives"
  drop_caches
  read -r cs _ < <(timed sh -c "cp -r '$ckpt' '$work/copy' && sync")
  rm -rf "$work/copy"
  echo "round $r: pack $ps s ($(echo "$bytes / $ps / 1000000" | bc) MB/s, peak RSS $((prss / 1024)) MB); cp $cs s ($(echo "$bytes / $cs / 1000000" | bc) MB/s)"
  results+=("{\"round\": $r, \"pack_s\": $ps, \"pack_max_rss_kb\": $prss, \"cp_s\": $cs}")
done
printf '{"checkpoint": "%s", "bytes": %s, "drives": %s, "rounds": [%s]}\n' "$ckpt" "$bytes" \
  "$drives" "$(IFS=,; echo "${results[*]}")" >"$out"
echo "pack.sh: wrote $out"
