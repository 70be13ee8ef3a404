#!/bin/bash
# Every command's --help comes from its option table: exit 0, the same text for -h, each
# option line saying its default at most once (the default comes from one place, the
# table), and k3-uring --help naming every command.
source "$(dirname "$0")/lib.sh"
for cmd in run synth pack iobench plan tokenize replay; do
  help=$("$K3" "$cmd" --help) || fail "$cmd --help exited $?"
  [[ "$help" == "$("$K3" "$cmd" -h)" ]] || fail "$cmd: -h and --help differ"
  [[ $(grep -c -- "-h, --help" <<<"$help") -eq 1 ]] || fail "$cmd --help does not list -h, --help once"
  twice=$(grep -E "default.*default" <<<"$help")
  [[ -z "$twice" ]] || fail "$cmd --help says a default twice: $twice"
  "$K3" --help | grep -q "^  $cmd " || fail "k3-uring --help does not name $cmd"
done
echo "$("$K3" run --help | grep -c default) run options show a default"
finish
