#!/bin/bash
# Prediction with the trunk streamed (--ram floor) routes with the next layer's router
# as it is on the drives, not with whatever its stream slot held before: it finds about as
# many records ready as with the trunk resident (k3-tiny, --no-cache: a router read from a
# stale slot finds about 50% against 75%), and the tokens are the same.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/predict-streamed"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack -m "$m" --drives "$d/a,$d/b" -q || exit 1
ready() { # RAM → "IDS PERCENT"
  "$K3" run --drives "$d/a,$d/b" --ids 5,6,7,8 -n 24 -t 1 --no-cache --ram "$1" --print-ids \
    2>"$d/$1.err" | tr '\n' ' '
  sed -n 's/.* \([0-9.]*\)% of records ready.*/\1/p' "$d/$1.err"
}
read -r ids_trunk trunk < <(ready trunk)
read -r ids_floor floor < <(ready floor)
[[ -n "$trunk" && -n "$floor" && "$ids_trunk" == "$ids_floor" ]] ||
  fail "runs failed or differ: trunk \"$ids_trunk\" $trunk%, floor \"$ids_floor\" $floor%"
awk -v t="$trunk" -v f="$floor" 'BEGIN { exit !(f >= 0.9 * t) }' &&
  echo "ok: records ready when asked: $trunk% with the trunk resident, $floor% streamed" ||
  fail "prediction with the trunk streamed finds $floor% of records ready, resident $trunk%"
finish
