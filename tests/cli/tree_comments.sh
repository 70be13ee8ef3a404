#!/bin/bash
# The sources say why, not when, nor how fast one host was: no comment or script names an
# issue number, the history of a fix ("before the fix", "used to fail", "where 16 bits
# held", "it was ... before", "was 5.4x"), one host's speeds ("on a VM", "seconds a GB",
# "0.2 ms a miss", "a sixth of the time", "10 s here"), or a folder of our own build
# machines (/work/...); a user's machine has none of them, and measurements live in
# bench/results and commit messages.  Checked over engine/, iouring/, numa/, bench/ (its
# scripts and programs, not its results), tests/ and the Makefile.
source "$(dirname "$0")/lib.sh"
cd "$K3_ROOT" || exit 1
files=$(git ls-files engine iouring numa bench tests Makefile 2>/dev/null |
        grep -v -e '^bench/results/' -e '^engine/synth/corpus' -e '^tests/cli/tree_comments.sh$' -e '\.md$')
[[ -n $files ]] || { echo "skip: not a git checkout" >&2; exit 77; }
history='issue [0-9]+|before the fix|after the fix|used to (fail|fall|be |cost|take|crash|hang)|[0-9]+ bits held|it was .*before|(was|were) [0-9.]+x|went from [0-9]|as (it|they) always did'
host='on (a|this) VM|this VM|seconds a GB|[0-9.]+ ?s a GB|a second or more a GB|[0-9.]+ ?(s|ms|us) (a|per) (miss|GB)\b|(a|one) (tenth|sixth|fifth|quarter|third) of the time|[0-9.]+ ?(s|ms|us|minutes) here|markedly'
# Known, being cleaned in the faults branch (engine/stream and iouring are its files this
# round): FILE:TEXT, a match in FILE on a line holding TEXT.  Remove each once it is gone.
known=(
  'engine/stream/cache.c:on a VM that costs'
  'engine/stream/cache.c:seconds a GB, several times'
  'engine/stream/stream_internal.h:where 16 bits held'
  'engine/stream/slots.c:0.2 ms a miss at 53,760 slots'
  'iouring/reader.h:a second or more a GB on a VM'
  'iouring/reader.h:as they always did'
  'iouring/uring_buffers.c:about a second per GB on a VM'
)
found=$(grep -nE -i "$history|$host|/work/" $files | while IFS= read -r hit; do
  file=${hit%%:*} text=${hit#*:*:}
  for k in "${known[@]}"; do
    [[ $file == "${k%%:*}" && $text == *"${k#*:}"* ]] && continue 2
  done
  printf '%s\n' "$hit"
done)
[[ -z $found ]] || fail "history, one host's speeds or a build machine's folder in the sources:
$found"
finish
