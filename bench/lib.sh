# shellcheck shell=bash disable=SC2154,SC2034
# Shell helpers shared by the bench/ scripts (sourced, not run). Each script sets `prog` to its own name before sourcing, so every
# message says which script spoke.

# ---- the benchmark's defaults: one place, read by run.sh, pipeline.sh and any stage ----
# (bench/README.md documents each; a knob set in the environment overrides its default)
# The folder every benchmark keeps its data in (checkpoints, emulated drives, packs, read
# files), unless a knob names another: DATA, else the user's cache folder.
bench_data=${DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/k3-uring}
bench_default_ckpt=$bench_data/k3-bench  # synthesized there (k3-bench, seed 1) when missing
bench_default_counts="1 2 4 8"           # emulated boxes; with DRIVES: 1 2 4 .. and all of them
bench_default_mbps=100                   # per emulated drive; 8 x 100 stays linear here (README)
bench_default_rounds=3
bench_default_tokens=6
bench_default_stages="kernels decode cold-decode serve replay grammar agents"
bench_emulate_root=$bench_data/emulate   # emulate.sh's backing files, one folder per box
# du -sb of `k3-uring synth --config k3-bench --seed 1`: what the
# default checkpoint takes before it exists.
bench_k3bench_bytes=19956996677
# and of `k3-uring synth --config k3-slice --seed 1`, the slice
# stage's checkpoint, beside the emulated boxes' folder.
bench_k3slice_bytes=13755250118
slice_ckpt=${SLICE:-$bench_data/k3-slice}   # SLICE= elsewhere

# die MESSAGE: one line on stderr, exit 1.
die() { echo "$prog: $*" >&2; exit 1; }
# skip MESSAGE: the machine lacks something (root, loop devices, a throttle): one line
# on stderr, exit 77 so a caller can fall back (to plain folders, or skip a test).
skip() { echo "$prog: $*" >&2; exit 77; }
warn() { echo "$prog: warning: $*" >&2; }
say() { echo "$prog: $*" >&2; }

# to_bytes SIZE: prints SIZE in bytes. Suffixes as truncate(1) reads them: K M G T are
# powers of 1024 (also KiB MiB GiB TiB), KB MB GB TB powers of 1000; none means bytes.
to_bytes() {
  local s=$1 n unit
  [[ $s =~ ^([0-9]+)([KMGT]?)(i?B?)$ ]] || return 1
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  local base=1024
  [[ ${BASH_REMATCH[3]} == B ]] && base=1000
  case $unit in
    "") echo "$n" ;;
    K) echo $((n * base)) ;;
    M) echo $((n * base ** 2)) ;;
    G) echo $((n * base ** 3)) ;;
    T) echo $((n * base ** 4)) ;;
  esac
}

# need_value FLAG ARGC: an option that takes a value was given one (else usage error, 2).
need_value() { (($2 >= 2)) || { echo "$prog: $1 needs a value" >&2; exit 2; }; }

# A positive (or, with allow_zero, non-negative) integer option; a usage error (2).
check_uint() {
  local flag=$1 v=$2 allow_zero=${3:-}
  if ! [[ $v =~ ^[0-9]+$ ]]; then echo "$prog: $flag: want a whole number, got '$v'" >&2; exit 2; fi
  if [[ -z $allow_zero && $v -eq 0 ]]; then echo "$prog: $flag: want a number above 0, got '$v'" >&2; exit 2; fi
}

# drop_caches: so nothing earlier runs left in the page cache is read back from RAM
# (fio reads with O_DIRECT, but the engine and `cp` do not). Root only; a no-op otherwise.
drop_caches() {
  sync
  if [[ $(id -u) -eq 0 ]]; then echo 3 >/proc/sys/vm/drop_caches; fi
}

# decode_stats: the engine's closing statistics line (its stderr on stdin) as
# "S_PER_TOKEN STALL_S_PER_TOKEN MB_PER_TOKEN READY_PCT"; nothing if there is none.
decode_stats() {
  grep ' generated [0-9]* tokens, ' | tail -1 | sed -n 's/.*, \([0-9.]*\) s\/token; \([0-9.]*\) MB read per token.*stall \([0-9.]*\) s\/token, \([0-9.]*\)%.*/\1 \3 \2 \4/p'
}

# decode_records_read: the records a run's decode steps read, summed (its --stats lines
# "token N: ..., R records read, ..." on stdin).
decode_records_read() {
  awk '/ token [0-9]+: / { for (i = 2; i <= NF; i++) if ($i == "records") n += $(i - 1) }
       END { print n + 0 }'
}

# packed_box K3 CHECKPOINT NAME DRIVES MBPS: an emulated box (emulate.sh) of DRIVES drives
# read-throttled to MBPS, torn down when the script exits, with CHECKPOINT packed on it;
# sets box_drives to its drive list.
packed_box() {
  local k3=$1 ckpt=$2 name=$3 drives=$4 mbps=$5 here size
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  size=$(( $(du -sb "$ckpt" | cut -f1) / drives / 1000000000 + 3 ))G
  box_drives=$("$here/emulate.sh" up --drives "$drives" --size "$size" --mbps "$mbps" --name "$name" | tail -1)
  # shellcheck disable=SC2064
  trap "'$here/emulate.sh' down --name '$name' >/dev/null 2>&1 || true" EXIT
  "$k3" pack --checkpoint "$ckpt" --drives "$box_drives" -q
}

# median: numbers on stdin, one a line; prints their median (mean of the middle two
# when even).
median() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit 1
    if (NR % 2) print v[(NR + 1) / 2]; else printf "%.17g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# iobench_steady: `k3-uring iobench`'s summary line (its stderr on stdin) as
# "S_PER_TOKEN GBPS" of its steady state; nothing if there is none.
iobench_steady() {
  sed -n 's/^k3-uring iobench: .* \([0-9.]*\) s\/token, \([0-9.]*\) GB\/s; .*/\1 \2/p'
}

# fio_read_bw JSONFILE: the aggregate read bandwidth in bytes/s of a fio run made with
# --group_reporting --output-format=json (jobs[0].read.bw_bytes). fio pretty-prints its
# JSON one key a line, so awk finds it without python or jq (neither is a dependency).
fio_read_bw() {
  awk '/"read" : \{/ { inread = 1 }
       inread && /"bw_bytes" :/ { gsub(/[^0-9]/, "", $3); print $3; found = 1; exit }
       END { if (!found) exit 1 }' "$1"
}

# read_rate K3 MODEL: "GB/s<TAB>how it was measured" for the storage MODEL is read from.
# A checkpoint folder: fio, O_DIRECT through io_uring, 1 MiB reads 16 deep over the first
# 1.6 GB of its last shard (the experts'), as the engine reads records: many at once (dd,
# one read at a time, gets 5-10% less from a virtual disk).  A pack (drive folders): the
# engine's own read path, `iobench --ram floor --no-cache` (trunk segments and 16 random
# records per MoE layer, the page cache dropped first).
read_rate() {
  local k3=$1 model=$2 line rate shards json
  if [[ -f $model/config.json ]]; then
    command -v fio >/dev/null || die "needs fio (apt-get install fio)"
    shards=("$model"/model-*.safetensors)
    json=$(mktemp)
    fio --name=disk --filename="${shards[-1]}" --readonly --rw=read --bs=1M --iodepth=16 \
      --ioengine=io_uring --direct=1 --size=1600M --output-format=json >"$json" 2>&1 ||
      { rm -f "$json"; die "fio on ${shards[-1]} failed"; }
    rate=$(fio_read_bw "$json" | awk '{ printf "%.3f\n", $1 / 1e9 }') || true
    rm -f "$json"
    [[ -n $rate ]] || die "fio printed no read bandwidth for ${shards[-1]}"
    printf '%s\tfio --rw=read --bs=1M --iodepth=16 --ioengine=io_uring --direct=1 --size=1600M on %s\n' "$rate" "${shards[-1]}"
  else
    drop_caches
    line=$("$k3" iobench --drives "$model" --ram floor --no-cache -n "${IOBENCH_TOKENS:-3}" 2>&1 >/dev/null | tail -1)
    read -r _ rate < <(iobench_steady <<<"$line") || true
    [[ -n $rate ]] || die "iobench printed no rate: $line"
    printf '%s\tk3-uring iobench --drives %s --ram floor --no-cache: %s\n' "$rate" "$model" "$line"
  fi
}

# ---- disks and free space ------------------------------------------------------------

# existing_dir PATH: PATH, or its nearest ancestor that exists (where it would be made).
existing_dir() {
  local p
  p=$(realpath -m "$1")
  while [[ ! -d $p ]]; do p=$(dirname "$p"); done
  echo "$p"
}
# mount_of PATH: the mount point of the filesystem PATH is (or would be) on.
mount_of() { df --output=target "$(existing_dir "$1")" | tail -1; }
# free_bytes PATH: bytes available to this user on PATH's filesystem.
free_bytes() { df -B1 --output=avail "$(existing_dir "$1")" | tail -1 | tr -d ' '; }
# need_ram WHAT SIZE: dies unless SIZE (e.g. 14G) and half a GB more are available
# (MemAvailable) for the run WHAT names.
need_ram() {
  local need avail
  need=$(to_bytes "$2") || die "$1: want a size like 14G, got '$2'"
  avail=$(awk '/^MemAvailable:/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo)
  ((avail > need + 500000000)) ||
    die "$1 needs $(gb "$need") GB of RAM and 0.5 more; $(gb "$avail") GB are available"
}
# gb BYTES: BYTES in GB (10^9), one decimal.
gb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e9 }'; }

# disk_of DIR: the physical disk(s) under DIR's filesystem ("nvme0n1", "sda+sdb" for a
# RAID or LVM over two), or "fs:SOURCE" when it is on no block device (tmpfs, overlay,
# NFS): the key two drives must not share.
disk_of() {
  local src disks
  src=$(findmnt -no SOURCE -T "$1" | head -1)
  if [[ -b $src ]]; then
    disks=$(lsblk -nrso NAME,TYPE "$src" 2>/dev/null | awk '$2 == "disk" { print $1 }' | sort -u | paste -sd+)
    [[ -n $disks ]] && { echo "$disks"; return; }
  fi
  echo "fs:$src"
}
# disk_model DISK: what the disk says it is (its model), or a note that it says nothing.
disk_model() {
  local d=${1%%+*} m=''
  [[ $d == fs:* ]] && { echo "not a block device"; return; }
  m=$(cat "/sys/block/$d/device/model" 2>/dev/null || lsblk -dno MODEL "/dev/$d" 2>/dev/null || true)
  m=$(echo "$m" | xargs)
  echo "${m:-no model reported}"
}
