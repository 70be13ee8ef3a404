#!/bin/bash
# An emulated multi-NVMe box on one disk: N sparse files, each a loop device with
# direct I/O (so reads skip the page cache of both the emulated drive and the backing
# file), each an ext4 filesystem mounted at DIR/driveI, each throttled for reads to a set
# bandwidth by the block cgroup. Anything run with `exec` is in that cgroup, and so are
# its threads, io_uring's workers included. See bench/README.md.
#
#   bench/emulate.sh up   [--drives N] [--size SIZE] [--mbps M] [--dir DIR] [--name NAME]
#   bench/emulate.sh exec [--name NAME] [--dir DIR] -- CMD ARGS...
#   bench/emulate.sh run  [up options] -- CMD ARGS...   (up, exec, down even when killed)
#   bench/emulate.sh down [--name NAME] [--dir DIR]
#   bench/emulate.sh status [--name NAME] [--dir DIR]
#   bench/emulate.sh check    (can this machine emulate? changes nothing)
#
# Exit codes: 0 ok, 1 error, 2 usage, 77 this machine cannot emulate (not root, no loop
# devices, no block-cgroup read throttle): the caller falls back to plain folders.
set -euo pipefail
shopt -s nullglob
prog=emulate.sh
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

# ---- knobs and their defaults ------------------------------------------------------

def_name=default
def_drives=4
def_size=2G
def_mbps=100
def_sector=512      # the loop device's logical block size (losetup's own default)
def_root=$bench_emulate_root
registry=/run/k3-uring-emulate   # NAME -> DIR, so `exec` and `down` find a --dir'd box

usage() {
  cat <<EOF
usage: bench/emulate.sh up|exec|run|down|status|check [options] [-- CMD ARGS...]
  up      make the drives; prints the drive list (comma-separated mounts) last on stdout
  exec    run CMD inside the box's throttled cgroup (replaces this shell)
  run     up, then exec CMD with the drive list in \$K3_EMULATE_DRIVES, then down,
          also when interrupted
  down    unmount, detach, remove the cgroup and the backing files; idempotent
  status  what is up, and the throttle in force
  check   whether this machine can emulate (root, loop devices, a read throttle);
          exit 0 or 77 with the reason; changes nothing
options (default):
  --name NAME        box name; cgroup k3-emulate-NAME ($def_name)
  --dir DIR          backing files and mount points ($def_root/NAME)
  --drives N         number of drives ($def_drives)
  --size SIZE        each drive's size; K M G T = 2^10.., KB MB GB TB = 10^3.. ($def_size)
  --mbps M           read limit per drive in MB/s, MB = 10^6 bytes; 0 = none ($def_mbps)
  --sector-size B    logical block size of each loop device ($def_sector)
exit codes: 0 ok, 1 error, 2 usage, 77 cannot emulate here (not root, no loop devices,
no block-cgroup throttle)
EOF
}

usage_error() { echo "$prog: $*" >&2; echo "$prog: see bench/emulate.sh --help" >&2; exit 2; }

name=$def_name drives=$def_drives size=$def_size mbps=$def_mbps sector=$def_sector dir=
cmd=()
parse() {
  while (($#)); do
    case $1 in
      --name) need_value "$1" $#; name=$2; shift 2 ;;
      --dir) need_value "$1" $#; dir=$2; shift 2 ;;
      --drives) need_value "$1" $#; drives=$2; shift 2 ;;
      --size) need_value "$1" $#; size=$2; shift 2 ;;
      --mbps) need_value "$1" $#; mbps=$2; shift 2 ;;
      --sector-size) need_value "$1" $#; sector=$2; shift 2 ;;
      -h|--help) usage; exit 0 ;;
      --) shift; cmd=("$@"); break ;;
      *) usage_error "unknown option '$1'" ;;
    esac
  done
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || usage_error "--name: letters, digits, '.', '_', '-' only, got '$name'"
  # A box given --dir at `up` is found again by name through the registry.
  if [[ -z $dir ]]; then
    if [[ -f $registry/$name ]]; then dir=$(cat "$registry/$name"); else dir=$def_root/$name; fi
  fi
  dir=$(realpath -m "$dir")
}

# ---- what this machine offers --------------------------------------------------------

# Sets cg_ver (v1|v2) and cg_root (the hierarchy's mount point), or skips. v1 first:
# the io controller lives in one hierarchy only, and on a hybrid box that is blkio.
cg_ver='' cg_root=''
detect_cgroup() {
  cg_root=$(awk '$3 == "cgroup" && $4 ~ /(^|,)blkio(,|$)/ { print $2; exit }' /proc/mounts)
  if [[ -n $cg_root && -f $cg_root/blkio.throttle.read_bps_device ]]; then cg_ver=v1; return; fi
  cg_root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
  if [[ -n $cg_root ]] && grep -qw io "$cg_root/cgroup.controllers" 2>/dev/null; then
    cg_ver=v2; return
  fi
  skip "no block-cgroup read throttle (neither cgroup v1 blkio.throttle nor cgroup v2 io.max)"
}

check_machine() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (loop devices, mounts, cgroups)"
  local c
  for c in losetup mkfs.ext4 mount umount mountpoint truncate; do
    command -v "$c" >/dev/null || skip "needs $c"
  done
  [[ -e /dev/loop-control ]] || modprobe loop 2>/dev/null || true
  [[ -e /dev/loop-control ]] || skip "no loop devices (/dev/loop-control missing)"
  if ((mbps > 0)); then detect_cgroup; fi
}

# ---- state ---------------------------------------------------------------------------
# DIR/state gets one line per thing made, appended as soon as it exists, so `down`
# undoes a half-finished `up` too:
#   name NAME | created_dir | cgroup VER PATH | file PATH | loop DEV FILE | mount PATH |
#   drives LIST (last: the box is complete)

state() { echo "$dir/state"; }
# A DIR shared by mistake between two boxes must not let one tear down the other.
check_owner() {
  local owner
  owner=$(state_field name)
  [[ -z $owner || $owner == "$name" ]] || die "$dir holds box '$owner', not '$name'"
}
record() { echo "$*" >>"$(state)"; }
state_field() { [[ -f $(state) ]] || return 0; awk -v k="$1" '$1 == k { $1 = ""; print substr($0, 2) }' "$(state)"; }

# ---- up ------------------------------------------------------------------------------

# knob NAME VALUE DEFAULT [NOTE]: one line per knob, so a log says what was run.
knob() {
  local mark=""
  [[ $2 == "$3" ]] && mark=" (default)"
  printf '%s:   %-14s %s%s%s\n' "$prog" "$1" "$2" "$mark" "${4:+  -- $4}" >&2
}

# throttle MAJ:MIN: the read limit on one device, in the box's cgroup.
throttle() {
  local mm=$1 bps=$((mbps * 1000 * 1000)) cg
  cg=$(state_field cgroup | cut -d' ' -f2)
  if [[ $cg_ver == v1 ]]; then
    echo "$mm $bps" >"$cg/blkio.throttle.read_bps_device"
    grep -q "^$mm $bps\$" "$cg/blkio.throttle.read_bps_device" ||
      die "the read limit on $mm did not take in $cg"
  else
    echo "$mm rbps=$bps" >"$cg/io.max"
    grep -q "^$mm rbps=$bps " "$cg/io.max" || die "the read limit on $mm did not take in $cg"
  fi
}

make_cgroup() {
  local cg=$cg_root/k3-emulate-$name
  [[ -e $cg ]] && die "cgroup $cg exists already (a box left up? bench/emulate.sh down --name $name)"
  if [[ $cg_ver == v2 ]] && ! grep -qw io "$cg_root/cgroup.subtree_control"; then
    # Children get io.max only when their parent hands the controller down.
    echo +io >"$cg_root/cgroup.subtree_control" || die "cannot enable the io controller in $cg_root"
  fi
  mkdir "$cg"
  record cgroup "$cg_ver" "$cg"
}

# make_drive I: appends its mount point to mnts.
make_drive() {
  local i=$1 dev
  local file=$dir/drive$i.img mnt=$dir/drive$i
  truncate -s "$size_bytes" "$file"
  record file "$file"
  dev=$(losetup --direct-io=on --sector-size "$sector" --show -f "$file") ||
    die "losetup on $file failed"
  record loop "$dev" "$file"
  # The backing file's filesystem may refuse direct I/O, and loop then quietly reads
  # through the page cache: the drive would be as fast as RAM on a second read.
  [[ $(cat "/sys/block/${dev#/dev/}/loop/dio") == 1 ]] ||
    warn "$dev: direct I/O is off (/sys/block/${dev#/dev/}/loop/dio), reads may hit the page cache"
  # Inode tables and journal zeroed now, so no ext4lazyinit writes during measurements;
  # 4 KiB blocks whatever the size (mke2fs picks 1 KiB for small ones); nothing reserved.
  mkfs.ext4 -q -F -b 4096 -m 0 -E lazy_itable_init=0,lazy_journal_init=0 "$dev" ||
    die "mkfs.ext4 on $dev failed"
  mkdir -p "$mnt"
  mount -t ext4 -o noatime "$dev" "$mnt" || die "cannot mount $dev on $mnt"
  record mount "$mnt"
  if ((mbps > 0)); then throttle "$(cat "/sys/block/${dev#/dev/}/dev")"; fi
  mnts+=("$mnt")
}

up_done=0
up_cleanup() {
  ((up_done)) && return
  say "up did not finish; tearing down what was made"
  do_down >/dev/null || true
}

# up [quiet]: prints the drive list last on stdout, unless quiet (for `run`).
do_up() {
  check_uint --drives "$drives"
  check_uint --mbps "$mbps" allow_zero
  check_uint --sector-size "$sector"
  size_bytes=$(to_bytes "$size") || usage_error "--size: want a size like 256M or 2G, got '$size'"
  ((size_bytes >= 64 * 1024 * 1024)) || usage_error "--size: at least 64M, got $size"
  check_machine
  local cg_desc="none (--mbps 0)"
  if ((mbps > 0)); then cg_desc="$cg_ver $cg_root/k3-emulate-$name"; fi
  say "up, every knob:"
  knob --name "$name" "$def_name"
  knob --dir "$dir" "$(realpath -m "$def_root/$name")"
  knob --drives "$drives" "$def_drives"
  knob --size "$size" "$def_size" "$size_bytes bytes each, sparse"
  knob --mbps "$mbps" "$def_mbps" "$((mbps * 1000 * 1000)) bytes/s read limit per drive; MB = 10^6 B"
  knob --sector-size "$sector" "$def_sector"
  knob cgroup "$cg_desc" "" "reads throttled, writes not"
  knob filesystem "ext4 -b 4096 -m 0, no lazy init, mounted noatime" ""

  [[ -f $(state) ]] && die "box '$name' is up already ($(state)); bench/emulate.sh down --name $name"
  trap up_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local created=0
  [[ -d $dir ]] || created=1
  mkdir -p "$dir" "$registry"
  record name "$name"
  if ((created)); then record created_dir; fi
  echo "$dir" >"$registry/$name"
  if ((mbps > 0)); then make_cgroup; fi
  local i
  mnts=()
  for ((i = 0; i < drives; i++)); do make_drive "$i"; done
  local list
  list=$(IFS=,; echo "${mnts[*]}")
  record drives "$list"
  up_done=1
  trap - EXIT INT TERM
  say "up: $drives drives in $dir"
  [[ ${1:-} == quiet ]] || echo "$list"
}

# ---- down ----------------------------------------------------------------------------

# Everything made under this name, from the state file and, should it be missing or
# short, from what is found: our backing files' loop devices, mounts on our mount
# points, the cgroup by its name. Never touches a loop device backed by another file.
drive_files() { local f; for f in "$dir"/drive*.img; do [[ $f =~ /drive[0-9]+\.img$ ]] && echo "$f"; done; return 0; }
drive_dirs() { local f; for f in "$dir"/drive*; do [[ $f =~ /drive[0-9]+$ && -d $f ]] && echo "$f"; done; return 0; }
our_loops() {
  local f dev rest
  drive_files | while read -r f; do losetup -j "$f" | cut -d: -f1; done
  state_field loop | while read -r dev f; do
    rest=$(cat "/sys/block/${dev#/dev/}/loop/backing_file" 2>/dev/null) || continue
    [[ $rest == "$f" || $rest == "$f (deleted)" ]] && echo "$dev"
  done
}
our_cgroups() {
  state_field cgroup | cut -d' ' -f2
  local root
  awk '($3 == "cgroup" && $4 ~ /(^|,)blkio(,|$)/) || $3 == "cgroup2" { print $2 }' /proc/mounts |
    while read -r root; do
      if [[ -d $root/k3-emulate-$name ]]; then echo "$root/k3-emulate-$name"; fi
    done
}

remove_cgroup() {
  local cg=$1 parent pid
  parent=$(dirname "$cg")
  # A process still inside (a crashed run's) would keep the cgroup alive: hand it back
  # to the parent rather than kill it.
  while read -r pid; do
    warn "pid $pid is still in $cg; moving it out"
    echo "$pid" >"$parent/cgroup.procs" 2>/dev/null || true
  done < <(cat "$cg/cgroup.procs" 2>/dev/null)
  rmdir "$cg" 2>/dev/null || { sleep 0.2; rmdir "$cg"; } || warn "cannot remove cgroup $cg"
}

do_down() {
  check_owner
  if [[ ! -d $dir ]] && [[ -z $(our_cgroups) ]]; then
    rm -f "$registry/$name"
    say "down: nothing is up under '$name' ($dir)"
    return 0
  fi
  local cg mnt dev f created=0
  grep -qx created_dir "$(state)" 2>/dev/null && created=1
  while read -r cg; do remove_cgroup "$cg"; done < <(our_cgroups | sort -u)
  while read -r mnt; do
    mountpoint -q "$mnt" || continue
    # Busy (a shell cd'd there, a reader still running): detach it lazily so the loop
    # device frees itself once the last user lets go, and say so.
    umount "$mnt" 2>/dev/null || { warn "$mnt is busy; unmounting lazily"; umount -l "$mnt"; }
  done < <(drive_dirs)
  while read -r dev; do
    losetup -d "$dev" 2>/dev/null || warn "cannot detach $dev"
  done < <(our_loops | sort -u)
  while read -r f; do rm -f "$f"; done < <(drive_files)
  while read -r mnt; do
    rmdir "$mnt" 2>/dev/null || warn "$mnt is not empty; left in place"
  done < <(drive_dirs)
  rm -f "$(state)" "$registry/$name"
  if ((created)); then rmdir "$dir" 2>/dev/null || warn "$dir is not empty; left in place"; fi
  # The shared parents go too once no box uses them (rmdir leaves them otherwise).
  rmdir "$registry" 2>/dev/null || true
  if [[ $(dirname "$dir") == "$def_root" ]]; then rmdir "$def_root" 2>/dev/null || true; fi
  leftovers
}

# Fails, naming each, if anything of the box is still there.
leftovers() {
  local left=() f
  while read -r f; do left+=("file $f"); done < <(drive_files)
  while read -r f; do if mountpoint -q "$f"; then left+=("mount $f"); fi; done < <(drive_dirs)
  while read -r f; do left+=("loop $f"); done < <(our_loops)
  while read -r f; do left+=("cgroup $f"); done < <(our_cgroups)
  if ((${#left[@]})); then die "down left: ${left[*]}"; fi
  say "down: '$name' is gone ($dir)"
}

# ---- exec, run, status ---------------------------------------------------------------

do_exec() {
  ((${#cmd[@]})) || usage_error "exec needs a command after --"
  [[ -f $(state) ]] || die "box '$name' is not up (no $(state))"
  check_owner
  local cg
  cg=$(state_field cgroup | cut -d' ' -f2)
  # Writing our own pid moves this shell; exec keeps the pid, so CMD and every thread
  # and child it makes (io_uring workers too) start inside the cgroup.
  if [[ -n $cg ]]; then echo $$ >"$cg/cgroup.procs" || die "cannot join cgroup $cg"; fi
  K3_EMULATE_DRIVES=$(state_field drives) exec "${cmd[@]}"
}

child=
run_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $child ]] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  do_down || rc=1
  exit "$rc"
}

do_run() {
  ((${#cmd[@]})) || usage_error "run needs a command after --"
  do_up quiet
  trap run_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  say "run: drives $(state_field drives)"
  # In the background and waited for, so a signal to this shell is acted on at once
  # (bash runs traps only between foreground commands).
  "$0" exec --name "$name" --dir "$dir" -- "${cmd[@]}" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=
  exit "$rc"
}

do_status() {
  [[ -f $(state) ]] || { say "'$name' is not up ($dir)"; return 0; }
  cat "$(state)"
  local cg dev f
  cg=$(state_field cgroup | cut -d' ' -f2)
  state_field loop | while read -r dev f; do
    echo "dio $dev $(cat "/sys/block/${dev#/dev/}/loop/dio" 2>/dev/null || echo '?')"
  done
  if [[ -n $cg ]]; then
    local rule
    for rule in "$cg"/blkio.throttle.read_bps_device "$cg"/io.max; do
      [[ -f $rule ]] && sed "s|^|limit |" "$rule"
    done
    echo "procs $(tr '\n' ' ' <"$cg/cgroup.procs")"
  fi
}

# ---- main ----------------------------------------------------------------------------

(($#)) || { usage >&2; exit 2; }
mode=$1; shift
case $mode in
  -h|--help) usage; exit 0 ;;
  up|exec|run|down|status|check) parse "$@" ;;
  *) usage_error "unknown mode '$mode' (up, exec, run, down, status, check)" ;;
esac
case $mode in
  up) do_up ;;
  exec) do_exec ;;
  run) do_run ;;
  down)
    [[ $(id -u) -eq 0 ]] || skip "needs root (loop devices, mounts, cgroups)"
    do_down ;;
  status) do_status ;;
  check)
    check_machine
    say "can emulate: root, loop devices, ${cg_ver:-no} block-cgroup read throttle (${cg_root:-none needed with --mbps 0})" ;;
esac
