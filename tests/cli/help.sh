#!/bin/bash
# Every command's --help comes from its option table: exit 0, the same text for -h, each
# option line saying its default at most once (the default comes from one place, the
# table), and k3-uring --help naming every command. The commands are the ones k3-uring
# --help lists, so a new command is covered when it is added; the ones known today must
# be among them.
source "$(dirname "$0")/lib.sh"
mapfile -t commands < <("$K3" --help | awk '/^commands:/ {on = 1; next}
                                            on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
for known in run synth pack iobench plan tokenize serve replay; do
  [[ " ${commands[*]} " == *" $known "* ]] || fail "k3-uring --help does not list $known"
done
for cmd in "${commands[@]}"; do
  help=$("$K3" "$cmd" --help) || fail "$cmd --help exited $?"
  [[ "$help" == "$("$K3" "$cmd" -h)" ]] || fail "$cmd: -h and --help differ"
  [[ $(grep -c -- "-h, --help" <<<"$help") -eq 1 ]] || fail "$cmd --help does not list -h, --help once"
  twice=$(grep -E "default.*default" <<<"$help")
  [[ -z "$twice" ]] || fail "$cmd --help says a default twice: $twice"
done
echo "${#commands[@]} commands: ${commands[*]}"
echo "$("$K3" run --help | grep -c default) run options show a default"
finish
