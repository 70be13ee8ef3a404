#!/bin/bash
# make bench: the whole benchmark, every figure a ratio measured in this run.  Stages, in
# the order STAGES names them (the table below, one line each):
#   kernels  GB/s of weights per core, the planner's calibration (bench/kernels.sh);
#            skipped when CALIBRATION=FILE reuses one measured earlier
#   decode   for N in DRIVE_COUNTS: N drives (an emulated box of N drives throttled to
#            MBPS each; or the first N folders of DRIVES=, real drives; or plain folders
#            where neither is possible), the checkpoint packed onto them, fio's ceiling on
#            the same files, then the engine ROUNDS times each, alternating:
#              sync      --sync --predict off     one record at a time, no overlap
#              pipeline  --predict off            reads overlap compute within a layer
#              predict   --predict on             and the next layer's experts prefetched
#              floor     --predict on --ram floor the trunk streamed too
#            with --no-cache (every record read every token); one token traced (Perfetto)
#            on the largest N; the planner's projection for each N; then
#            bench/results/bench-<date>.{json,md} and PNG plots (report.py, gnuplot).
#   serve, replay, grammar (default too), and the optional ones: the stage table below
# A preflight runs first and writes nothing: the tools the chosen stages need, the
# drives, the calibration and the free disk space, each problem on one line naming what
# to do; PREFLIGHT_ONLY=1 (or --check) stops there.  On every exit (done, failed, Ctrl-C)
# the emulated box, the packs made in DRIVES and bench/results/tmp are removed; a failed
# run keeps its logs in ${TMPDIR:-/tmp}/k3-bench-<date>-failed.log.
# Knobs (environment; defaults in bench/lib.sh): CKPT, DRIVES, ALLOW_SAME_DEVICE,
#   DRIVE_COUNTS, MBPS, ROUNDS, TOKENS, CALIBRATION, STAGES, SLICE, PREFLIGHT_ONLY, K3;
#   bench/README.md says what each does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=bench
source "$root/bench/lib.sh"

check_only=${PREFLIGHT_ONLY:-0}
case ${1:-} in
  "") ;;
  --check) check_only=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "bench: unknown argument '$1' (--check, --help; the knobs are environment variables, see bench/README.md)" >&2
     exit 2 ;;
esac

k3=${K3:-$root/k3-uring}
ckpt=${CKPT:-$bench_default_ckpt}
drives_given=${DRIVES:-}
counts=${DRIVE_COUNTS:-}        # its default depends on the mode (below)
mbps=${MBPS:-$bench_default_mbps}
rounds=${ROUNDS:-$bench_default_rounds}
tokens=${TOKENS:-$bench_default_tokens}
calibration=${CALIBRATION:-}
stages=${STAGES:-$bench_default_stages}
case ${ALLOW_SAME_DEVICE:-0} in 1|yes|true) allow_same=1 ;; *) allow_same=0 ;; esac
stamp=$(date -u +%Y%m%d-%H%M%S)
res=$root/bench/results
work=$res/tmp/bench-$stamp
box=bench-$$                    # the emulated box's name: two runs at once do not share one

# ---- stages ----------------------------------------------------------------------------
# stage NAME "TOOLS IT NEEDS" "WHAT IT MEASURES" COMMAND ARGS...: one line per stage.  The
# preflight checks the tools of the stages STAGES names; COMMAND runs in this shell (a
# function below) or is a script, run with the shared knobs in its environment (stage_env)
# that writes its own results in bench/results/.
stage_names=()
declare -A stage_tools stage_what stage_cmd
stage() {
  local name=$1
  stage_names+=("$name") stage_tools[$name]=$2 stage_what[$name]=$3
  shift 3
  stage_cmd[$name]=$(printf '%q ' "$@")
}
stage kernels "make cc" "MXFP4 and bf16 GB/s per core, and GFLOP/s over 64 rows: the planner's calibration" stage_kernels
stage decode "fio bc python3 gnuplot" "decode on 1..N drives against fio and the planner" stage_decode
stage cold-decode "fio python3 gnuplot" "decode off one drive, cold and warm, in a memory cgroup: three budgets and --no-cache against fio, and the read area's fault time" "$root/bench/decode.sh"
stage serve "python3" "serve: 1..16 streaming clients sharing each layer's expert reads" "$root/bench/serve.sh"
stage drive-model "python3 bc" "the drive model checked; pipelined against --sync under it (its pack in /dev/shm)" "$root/bench/drive-model.sh"
stage ranks "mpirun bc" "two mpirun ranks, each on its own emulated box, against one box, I/O-bound" "$root/bench/ranks.sh"
stage prefill "fio curl jq python3" "prompts in passes: off one drive in a memory cgroup, two turns through serve, serve's schedule, the drive model traced" "$root/bench/prefill.sh"
stage replay "make cc" "real routing (a trace): cache policies against Belady, prediction from ids, unions; the engine replaying it" "$root/bench/replay.sh"
stage slice "python3 bc fio" "k3-slice (K3's widths): full K3 projected from its layers; its s/token against the planner" "$root/bench/slice-plan.sh"
stage grammar "make cc" "constrained decoding: the grammar mask's ms/token at K3's 163,840-id vocabulary" "$root/bench/grammar.sh"
stage agents "curl jq" "an agent's second turn (a tool result sent back) against its new tokens alone" "$root/bench/agents.sh"

# The environment a stage script gets: the knobs as this run resolved them.
stage_env() {
  export K3=$k3 CKPT=$ckpt MBPS=$mbps ROUNDS=$rounds TOKENS=$tokens CALIBRATION=${calibration:-$res/calibration.json}
  export DRIVES=$drives_given ALLOW_SAME_DEVICE=$allow_same DRIVE_COUNTS=$counts
  export BENCH_STAMP=$stamp BENCH_RESULTS=$res BENCH_WORK=$work/$1 BENCH_MODE=$mode
  mkdir -p "$BENCH_WORK"
}

# ---- preflight: everything checked before anything is written --------------------------

problems=()
problem() { problems+=("$*"); }

# tool -> the Debian package that has it, for the line that says what to install.
declare -A package_of=([fio]=fio [gnuplot]=gnuplot-nox [bc]=bc [python3]=python3 [make]=make [mpirun]=openmpi-bin
  [cc]=build-essential [findmnt]=util-linux [lsblk]=util-linux [lscpu]=util-linux [df]=coreutils)
check_tools() {
  local tools="lscpu df findmnt lsblk" name t missing=() pkgs=()
  for name in $stages; do tools+=" ${stage_tools[$name]}"; done
  for t in $(tr ' ' '\n' <<<"$tools" | awk 'NF && !seen[$0]++'); do
    command -v "$t" >/dev/null && continue
    missing+=("$t")
    pkgs+=("${package_of[$t]:-$t}")
  done
  ((${#missing[@]})) || return 0
  problem "missing ${missing[*]}: \`make bench-deps\` installs $( ((${#missing[@]} > 1)) && echo them || echo it) (apt-get install $(printf '%s\n' "${pkgs[@]}" | sort -u | paste -sd' '))"
}

check_knobs() {
  local name v
  for name in $stages; do
    [[ -n ${stage_cmd[$name]:-} ]] || problem "STAGES: no stage '$name' (there are: ${stage_names[*]})"
  done
  [[ $mbps =~ ^[0-9]+$ ]] || problem "MBPS: want a whole number (0: no throttle), got '$mbps'"
  for v in "ROUNDS=$rounds" "TOKENS=$tokens"; do
    [[ ${v#*=} =~ ^[1-9][0-9]*$ ]] || problem "${v%%=*}: want a whole number above 0, got '${v#*=}'"
  done
  [[ -x $k3 ]] || problem "no engine at $k3: run \`make\` first (\`make bench\` does)"
  if [[ -n ${CKPT:-} && ! -f $ckpt/config.json ]]; then
    problem "CKPT=$ckpt: no checkpoint there (no config.json); leave CKPT unset to synthesize k3-bench at $bench_default_ckpt"
  fi
  if [[ -n $calibration ]]; then
    [[ -f $calibration ]] || problem "CALIBRATION=$calibration: no such file"
  elif ! [[ " $stages " == *" kernels "* ]] && [[ ! -f $res/calibration.json ]]; then
    problem "STAGES has no kernels and there is no $res/calibration.json: give CALIBRATION=FILE"
  fi
}

# The mode: real drives (DRIVES), an emulated box, or plain folders on this disk.
user_drives=()
declare -A drive_disk
choose_mode() {
  if [[ -n $drives_given ]]; then
    mode=drives
    check_drives
  elif emulate_why=$("$root/bench/emulate.sh" check 2>&1); then
    mode=emulated
  else
    mode=plain
    warn "cannot emulate drives here (${emulate_why#emulate.sh: }): plain folders in $res/tmp, unthrottled, so every N measures this one disk; DRIVES=/mnt/a,/mnt/b benches real drives"
  fi
  local n=${#user_drives[@]} c=1
  if [[ -z $counts ]]; then
    if [[ $mode == drives ]]; then # 1 2 4 .. below the number of drives, and all of them
      while ((c < n)); do counts+="$c "; c=$((c * 2)); done
      counts+="$n"
    else
      counts=$bench_default_counts
    fi
  fi
  counts_ok=1
  for c in $counts; do
    if ! [[ $c =~ ^[1-9][0-9]*$ ]]; then problem "DRIVE_COUNTS: want whole numbers above 0, got '$c'"; counts_ok=0
    elif [[ $mode == drives ]] && ((c > n)); then problem "DRIVE_COUNTS: $c drives, but DRIVES has $n"; counts_ok=0
    fi
  done
}

# Each folder exists, takes a file, and sits on a drive of its own.
check_drives() {
  local d disk probe
  declare -A first_on
  IFS=, read -r -a user_drives <<<"$drives_given"
  for d in "${user_drives[@]}"; do
    if [[ ! -e $d ]]; then problem "DRIVES: $d does not exist"; continue; fi
    if [[ ! -d $d ]]; then problem "DRIVES: $d is not a folder"; continue; fi
    if ! probe=$(mktemp -p "$d" .k3-bench-probe.XXXXXX 2>/dev/null); then
      problem "DRIVES: $d is not writable"; continue
    fi
    rm -f "$probe"
    disk=$(disk_of "$d")
    drive_disk[$d]=$disk
    if [[ -n ${first_on[$disk]:-} ]]; then
      local what="DRIVES: ${first_on[$disk]} and $d are on the same device ($disk), so their reads share one drive"
      if [[ $allow_same == 1 ]]; then warn "$what (ALLOW_SAME_DEVICE=1: running anyway)"
      else problem "$what; give one folder per drive, or ALLOW_SAME_DEVICE=1 to run anyway"; fi
    fi
    first_on[$disk]=$d
  done
}

# Whether a stage reads CKPT (kernels, ranks and slice bring their own data).
uses_checkpoint() {
  local s
  for s in $stages; do
    case $s in kernels | ranks | slice) ;; *) return 0 ;; esac
  done
  return 1
}

# box_size BYTES N: each emulated drive's size for a checkpoint of BYTES over N drives
# (its share and 3 GiB for ext4's own blocks and the pack's alignment).
box_size() { echo "$(($1 / $2 / 1000000000 + 3))G"; }

# Lines "N MOUNT BYTES WHAT" (tab-separated): what this run writes, per drive count N (0:
# kept for the whole run).  The packed copy is the checkpoint's bytes and 1% (measured:
# 1.0008x for a 3.25 GB checkpoint over 2 folders) and its manifests; an emulated box's
# ext4 takes 3% of its drives' size (measured: 2.3% of one 22G drive, 2.9% of 8 of 5G).
space_lines() {
  local bytes packed n i size
  if [[ " $stages " == *" ranks "* ]]; then # bench/ranks.sh: measured, 3.1 GB + 3 packs
    printf 'ranks\t%s\t%s\t%s\n' "$(mount_of "$bench_emulate_root")" 9000000000 \
      "the ranks stage's k3-bench-64 and its three packs on 8 loop filesystems"
  fi
  if [[ " $stages " == *" prefill "* ]]; then # bench/prefill.sh: a 1-drive and a 4-drive pack, kept
    local pw=${WORK:-$bench_data/prefill} p
    for p in d0 dm4/d0; do
      [[ -f $pw/$p/k3-uring.manifest ]] ||
        printf 'prefill\t%s\t%s\t%s\n' "$(mount_of "$pw")" "$((bench_k3bench_bytes * 101 / 100))" \
          "the prefill stage's pack of k3-bench in $pw/${p%/d0} (made once, kept)"
    done
  fi
  if [[ " $stages " == *" cold-decode "* && " $stages " != *" prefill "* &&
        ! -f $bench_data/prefill/d0/k3-uring.manifest ]]; then # bench/decode.sh: prefill's 1-drive pack
    printf 'cold-decode\t%s\t%s\t%s\n' "$(mount_of "$bench_data/prefill")" "$((bench_k3bench_bytes * 101 / 100))" \
      "the cold-decode stage's pack of k3-bench in $bench_data/prefill/d0 (made once, kept; prefill's too)"
  fi
  if [[ " $stages " == *" slice "* && ! -d $slice_ckpt ]]; then # bench/slice-plan.sh
    printf 'slice\t%s\t%s\t%s\n' "$(mount_of "$slice_ckpt")" "$bench_k3slice_bytes" \
      "k3-slice to synthesize at $slice_ckpt"
  fi
  uses_checkpoint || return 0
  if [[ -d $ckpt ]]; then
    bytes=$(du -sb "$ckpt" | cut -f1)
  else
    bytes=$bench_k3bench_bytes
    printf '0\t%s\t%s\t%s\n' "$(mount_of "$ckpt")" "$bytes" "k3-bench to synthesize at $ckpt"
  fi
  packed=$((bytes * 101 / 100 + 64000000))
  if [[ " $stages " == *" serve "* ]]; then # bench/serve.sh: its own box of 4, or DRIVES
    case $mode in
      drives)
        for ((i = 0; i < ${#user_drives[@]}; i++)); do
          printf 'serve\t%s\t%s\t%s\n' "$(mount_of "${user_drives[i]}")" "$((packed / ${#user_drives[@]}))" \
            "serve's packed copy over DRIVES"
        done ;;
      *)
        size=$(to_bytes "$(box_size "$bytes" 4)")
        printf 'serve\t%s\t%s\t%s\n' "$(mount_of "$bench_emulate_root")" "$((packed + 4 * size * 3 / 100))" \
          "serve's packed copy on 4 loop filesystems" ;;
    esac
  fi
  [[ " $stages " == *" decode "* ]] || return 0
  for n in $counts; do
    case $mode in
      emulated)
        size=$(to_bytes "$(box_size "$bytes" "$n")")
        printf '%s\t%s\t%s\t%s\n' "$n" "$(mount_of "$bench_emulate_root")" "$((packed + n * size * 3 / 100))" \
          "the packed copy on $n loop filesystems in $bench_emulate_root" ;;
      plain)
        printf '%s\t%s\t%s\t%s\n' "$n" "$(mount_of "$work")" "$packed" "the packed copy in $n folders in $work" ;;
      drives)
        for ((i = 0; i < n; i++)); do
          printf '%s\t%s\t%s\t%s\n' "$n" "$(mount_of "${user_drives[i]}")" "$((packed / n))" \
            "the packed copy over $n of DRIVES"
        done ;;
    esac
  done
}

# Per filesystem: what is kept, plus the most any one drive count adds, plus 0.5 GB for
# logs, the trace and the plots; refused when df shows less free.
check_space() {
  local mount need what have
  while IFS=$'\t' read -r mount need what; do
    have=$(free_bytes "$mount")
    if ((need > have)); then
      problem "needs $(gb "$need") GB free on $mount ($what), has $(gb "$have") GB: free $(gb $((need - have))) GB there, or give CKPT= a smaller checkpoint, fewer DRIVE_COUNTS, or DRIVES= on other disks"
    else
      say "space: $mount needs $(gb "$need") GB ($what), has $(gb "$have") GB"
    fi
  done < <(space_lines | awk -F'\t' '
      { key = $1 SUBSEP $2; sum[key] += $3; why[key] = $4; mounts[$2] = 1 }
      END {
        for (k in sum) {
          split(k, p, SUBSEP); n = p[1]; m = p[2]
          if (n == 0) { keep[m] += sum[k]; keepwhy[m] = sprintf("%s %.1f GB + ", why[k], sum[k] / 1e9) }
          else if (sum[k] > peak[m]) { peak[m] = sum[k]; peakwhy[m] = sprintf("%s %.1f GB", why[k], sum[k] / 1e9) }
        }
        for (m in mounts)
          printf "%s\t%.0f\t%s%s + 0.5 GB for logs and plots\n", m, keep[m] + peak[m] + 5e8, keepwhy[m], peakwhy[m]
      }')
}

# A box of an earlier run that was killed (SIGKILL leaves no chance to tear down).
check_leftovers() {
  local f pid
  for f in /run/k3-uring-emulate/bench-*; do
    [[ ${f##*/} =~ ^bench-([0-9]+)$ ]] || continue   # run.sh's own boxes: bench-PID
    pid=${BASH_REMATCH[1]}
    kill -0 "$pid" 2>/dev/null ||
      warn "emulated box ${f##*/} is still up from a run that was killed: bench/emulate.sh down --name ${f##*/}"
  done
}

preflight() {
  say "every knob: DATA=$bench_data CKPT=$ckpt DRIVES=${drives_given:-(none: emulated)} ALLOW_SAME_DEVICE=$allow_same DRIVE_COUNTS=\"${counts:-(by mode)}\" MBPS=$mbps ROUNDS=$rounds TOKENS=$tokens CALIBRATION=${calibration:-(none)} STAGES=\"$stages\" SLICE=$slice_ckpt K3=$k3"
  check_tools
  check_knobs
  choose_mode
  if ((counts_ok)); then check_space; fi
  check_leftovers
  if ((${#problems[@]})); then
    local p
    for p in "${problems[@]}"; do echo "bench: $p" >&2; done
    exit 1
  fi
  local d name
  say "mode: $mode; drive counts: $counts"
  for d in "${user_drives[@]}"; do say "drive $d: ${drive_disk[$d]} ($(disk_model "${drive_disk[$d]}")), real"; done
  for name in $stages; do say "stage $name: ${stage_what[$name]}"; done
}

# ---- cleanup on every exit -------------------------------------------------------------

box_is_up=0
made_dirs=()
cleanup() {
  local rc=$? d
  trap - EXIT INT TERM
  if ((box_is_up)); then "$root/bench/emulate.sh" down --name "$box" >/dev/null 2>&1 || warn "bench/emulate.sh down --name $box failed"; fi
  for d in "${made_dirs[@]}"; do rm -rf -- "$d"; done
  if ((rc != 0)) && [[ -d $work ]]; then
    local kept=${TMPDIR:-/tmp}/k3-bench-$stamp-failed.log
    find "$work" -name '*.log' -o -name '*.txt' | sort | while read -r d; do echo "==> $d"; cat "$d"; done >"$kept" 2>/dev/null
    say "failed (exit $rc); the run's logs are in $kept"
  fi
  rm -rf "$work"
  rmdir "$res/tmp" 2>/dev/null || true
  exit "$rc"
}

# ---- stage: kernels --------------------------------------------------------------------

stage_kernels() {
  if [[ -n $calibration ]]; then say "kernels: skipped, CALIBRATION=$calibration"; return; fi
  # gflops at 64 tokens: the many-row rates plan --prompt reads
  "$root/bench/kernels.sh" --sets bench,gflops --gflops-tokens 64 --reps 5 >"$work/kernels.txt" 2>&1 ||
    die "kernels.sh failed: $(tail -1 "$work/kernels.txt")"
  calibration=$(sed -n 's/^kernels.sh: wrote \(.*\.json\) .*/\1/p' "$work/kernels.txt")
  [[ -f $calibration ]] || die "kernels.sh wrote no calibration (see $work/kernels.txt)"
}

# ---- stage: decode ---------------------------------------------------------------------

# drives_up N: sets list to N drive folders holding nothing yet.
drives_up() {
  local n=$1 i d
  local dirs=()
  case $mode in
    emulated)
      box_is_up=1
      list=$("$root/bench/emulate.sh" up --drives "$n" --size "$(box_size "$(du -sb "$ckpt" | cut -f1)" "$n")" \
        --mbps "$mbps" --name "$box" 2>"$work/emulate-$n.log" | tail -1) ||
        die "bench/emulate.sh up failed: $(tail -1 "$work/emulate-$n.log")"
      return ;;
    plain) for ((i = 1; i <= n; i++)); do dirs+=("$work/plain$n/d$i"); done ;;
    drives) for ((i = 0; i < n; i++)); do dirs+=("${user_drives[i]}/k3-bench-$stamp"); done ;;
  esac
  # only folders made here are ever removed: a name already taken is an error
  for d in "${dirs[@]}"; do mkdir -p "$(dirname "$d")"; mkdir "$d"; made_dirs+=("$d"); done
  list=$(IFS=,; echo "${dirs[*]}")
}

drives_down() {
  if ((box_is_up)); then
    "$root/bench/emulate.sh" down --name "$box" >/dev/null 2>>"$work/emulate.log" ||
      die "bench/emulate.sh down --name $box failed: $(tail -1 "$work/emulate.log")"
    box_is_up=0
  fi
  local d
  for d in "${made_dirs[@]}"; do rm -rf -- "$d"; done
  made_dirs=()
}

# in_box CMD...: CMD inside the emulated box's throttled cgroup, or as it is.
in_box() {
  if ((box_is_up)); then "$root/bench/emulate.sh" exec --name "$box" -- "$@"; else "$@"; fi
}

# engine LABEL ARGS...: one engine run on the drives; prints "s/token stall MB/token
# ready%", or fails naming what the engine said.
engine() {
  local label=$1 log=$work/engine-$n-$r-$1.log s
  shift
  drop_caches
  in_box "$k3" --drives "$list" --ids 5,17,300,1200 -n "$tokens" --ignore-eos --print-ids --no-cache "$@" \
    >/dev/null 2>"$log" || die "$label run on $n drives failed: $(tail -1 "$log")"
  s=$(decode_stats <"$log")
  [[ -n $s ]] || die "$label run on $n drives printed no statistics line: $(tail -1 "$log")"
  echo "$s"
}

# drive_json: the drives the run measured, as JSON objects.
drive_json() {
  local d out=()
  for d in "${user_drives[@]}"; do
    out+=("{\"path\":\"$d\",\"device\":\"${drive_disk[$d]}\",\"model\":\"$(disk_model "${drive_disk[$d]}")\",\"real\":true}")
  done
  if [[ $mode != drives ]]; then
    local at=$bench_emulate_root
    [[ $mode == plain ]] && at=$work
    d=$(disk_of "$(existing_dir "$at")")
    out+=("{\"path\":\"$at\",\"device\":\"$d\",\"model\":\"$(disk_model "$d")\",\"real\":false}")
  fi
  (IFS=,; echo "${out[*]}")
}

stage_decode() {
  local cal=${calibration:-$res/calibration.json} mx bf n r rows=() last row fio stats proj
  local s_t s_st mb p_t p_st q_t q_st q_hit f_t f_mb
  [[ $cal -ef "$res/calibration.json" ]] || cp "$cal" "$res/calibration.json"
  mx=$(sed -n 's/.*"mxfp4_gbps_per_core": *\([0-9.]*\).*/\1/p' "$cal" | head -1)
  bf=$(sed -n 's/.*"bf16_gbps_per_core": *\([0-9.]*\).*/\1/p' "$cal" | head -1)
  say "calibration: MXFP4 $mx GB/s per core, bf16 $bf GB/s per core ($cal)"
  last=$(awk '{ print $NF }' <<<"$counts")
  for n in $counts; do
    drives_up "$n"
    "$k3" pack --checkpoint "$ckpt" --drives "$list" -q 2>"$work/pack-$n.log" ||
      die "pack onto $n drives failed: $(tail -1 "$work/pack-$n.log")"
    for r in $(seq 1 "$rounds"); do
      # the engine keeps 64 chunks of at most 1 MiB in flight over all drives
      local fioargs=(--drives "$list" --bs 1M --iodepth $((64 / n > 0 ? 64 / n : 1)) --file k3-uring.data)
      ((box_is_up)) && fioargs+=(--name "$box")
      fio=$("$root/bench/fio.sh" "${fioargs[@]}" 2>"$work/fio-$n-$r.log") ||
        die "fio on $n drives failed: $(tail -1 "$work/fio-$n-$r.log")"
      stats=$(engine sync --sync --predict off); read -r s_t s_st mb _ <<<"$stats"
      stats=$(engine pipeline --predict off); read -r p_t p_st _ _ <<<"$stats"
      stats=$(engine predict --predict on); read -r q_t q_st _ q_hit <<<"$stats"
      stats=$(engine floor --predict on --ram floor); read -r f_t _ f_mb _ <<<"$stats"
      proj=$("$k3" plan --config "$ckpt/config.json" --drives "$n" --drive-gbps "$(echo "$fio / $n / 1000000000" | bc -l)" \
        --cores "$(nproc)" --ram trunk --ctx 16 --calibration "$res/calibration.json" |
        sed -n 's/^  pipelined *\([0-9.]*\) s\/token.*/\1/p')
      [[ -n $proj ]] || die "k3-uring plan gave no pipelined projection for $n drives"
      row="{\"drives\":$n,\"round\":$r,\"emulated\":$((box_is_up)),\"mbps\":$([[ $mode == emulated ]] && echo "$mbps" || echo null),"
      row+="\"fio_Bps\":$fio,\"mb_per_token\":$mb,"
      row+="\"sync_s\":$s_t,\"sync_stall_s\":$s_st,\"pipeline_s\":$p_t,\"pipeline_stall_s\":$p_st,"
      row+="\"predict_s\":$q_t,\"predict_stall_s\":$q_st,\"predict_ready_pct\":$q_hit,"
      row+="\"floor_s\":$f_t,\"floor_mb_per_token\":$f_mb,\"plan_s\":$proj}"
      rows+=("$row")
      say "$n drives, round $r: fio $(echo "$fio / 1000000" | bc) MB/s; sync $s_t, pipeline $p_t, predict $q_t s/token (floor budget $f_t); plan $proj"
    done
    if [[ $n == "$last" ]]; then # one token traced on the largest N
      in_box "$k3" --drives "$list" --ids 5,17,300,1200 -n 2 --ignore-eos --print-ids --no-cache \
        --trace "$res/trace-$stamp.json" >/dev/null 2>"$work/trace.log" ||
        die "the traced run failed: $(tail -1 "$work/trace.log")"
    fi
    drives_down
  done
  local json=$res/bench-$stamp.json mbps_json=$mbps
  [[ $mode == emulated ]] || mbps_json=null
  printf '{"stamp":"%s","mode":"%s","drives":[%s],"knobs":{"ckpt":"%s","drive_counts":"%s","allow_same_device":%s,"mbps":%s,"rounds":%s,"tokens":%s,"stages":"%s"},"calibration":{"mxfp4":%s,"bf16":%s},"runs":[%s]}\n' \
    "$stamp" "$mode" "$(drive_json)" "$ckpt" "$counts" "$allow_same" "$mbps_json" "$rounds" "$tokens" "$stages" "$mx" "$bf" \
    "$(IFS=,; echo "${rows[*]}")" >"$json"
  python3 "$root/bench/report.py" "$json"
}

# ---- main ------------------------------------------------------------------------------

preflight
if ((check_only)); then say "preflight passed (PREFLIGHT_ONLY): nothing run"; exit 0; fi
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$work"
say "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(git -C "$root" log -1 --format='commit %h' 2>/dev/null || echo 'no git')"
if uses_checkpoint && [[ ! -d $ckpt ]]; then
  say "synthesizing k3-bench at $ckpt (once; about $(gb "$bench_k3bench_bytes") GB)"
  # beside it first, so a run stopped halfway leaves no checkpoint that looks whole
  made_dirs+=("$ckpt.synth-$$")
  "$k3" synth --config k3-bench --seed 1 --out "$ckpt.synth-$$" -q
  mv "$ckpt.synth-$$" "$ckpt"
  made_dirs=()
fi
for name in $stages; do
  say "stage $name"
  if [[ $(type -t "${stage_cmd[$name]%% *}") == function ]]; then
    eval "${stage_cmd[$name]}"
  else
    (stage_env "$name" && eval "${stage_cmd[$name]}") || die "stage $name failed"
  fi
done
say "done: $stages (results in $res)"
