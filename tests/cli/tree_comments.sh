#!/bin/bash
# The sources say why, not when: no comment or script names an issue number, the history
# of a fix ("before the fix", "used to fail"), or a folder of our own build machines
# (/work/...); a user's machine has none of them.  Checked over engine/, iouring/, numa/,
# bench/ (its scripts and programs, not its results), tests/ and the Makefile.
source "$(dirname "$0")/lib.sh"
cd "$K3_ROOT" || exit 1
files=$(git ls-files engine iouring numa bench tests Makefile 2>/dev/null |
        grep -v -e '^bench/results/' -e '^engine/synth/corpus' -e '^tests/cli/tree_comments.sh$' -e '\.md$')
[[ -n $files ]] || { echo "skip: not a git checkout" >&2; exit 77; }
found=$(grep -nE -i 'issue [0-9]+|before the fix|after the fix|used to fail|/work/' $files)
[[ -z $found ]] || fail "history or a build machine's folder in the sources:
$found"
finish
