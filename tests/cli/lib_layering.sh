#!/bin/bash
# The inference library stands alone: libk3.a has no undefined reference to a symbol
# that only libk3synth.a defines (synth, its BPE trainer and corpus stay out of the
# inference path; a binary that links libk3.a alone needs nothing from synth).
source "$(dirname "$0")/lib.sh"
command -v nm >/dev/null || { echo "skip: nm is not installed" >&2; exit 77; }
lib=$(dirname "$K3")
defined() { nm -g --defined-only "$1" | awk 'NF == 3 {print $3}' | sort -u; }
synth_only=$(comm -23 <(defined "$lib/libk3synth.a") <(defined "$lib/libk3.a"))
[[ -n "$synth_only" ]] || fail "libk3synth.a defines nothing of its own (was it built?)"
needed=$(nm -u "$lib/libk3.a" | awk '{print $NF}' | sort -u)
bad=$(comm -12 <(echo "$synth_only") <(echo "$needed"))
[[ -z "$bad" ]] || fail "libk3.a needs symbols only libk3synth.a defines: $(echo $bad)"
echo "libk3.a: no reference to any of libk3synth.a's $(echo "$synth_only" | wc -l) symbols"
exit $((failures > 0))
