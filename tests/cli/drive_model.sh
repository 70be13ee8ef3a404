#!/bin/bash
# --drive-model on a small pack (k3-tiny over two drives): the same token ids and logits
# bytes with and without the model (pipelined, --sync, the pread backend); the closing
# statistics say what the model timed against the storage's time; --trace holds a storage
# track per drive beside the reads the engine saw; iobench takes the option too; bad
# values and -m DIR are usage errors (exit 2, one line).  No timing thresholds: the
# model's times are checked in test_reader_model and measured in bench/drive-model.sh.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/drive_model"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$(tiny_model)" --drives "$d/a,$d/b" -q >/dev/null 2>&1 || fail "pack"
drives="$d/a,$d/b"
run() { # NAME ARGS...: ids to $d/NAME.ids, logits to $d/NAME.logits, stderr to $d/NAME.err
  local name=$1; shift
  "$K3" run --drives "$drives" --ids 5,17,300 -n 6 --ignore-eos --print-ids --ram floor \
    --logits-out "$d/$name.logits" "$@" >"$d/$name.ids" 2>"$d/$name.err" ||
    fail "$name exited $?: $(cat "$d/$name.err")"
}
same() { # A B: the same ids and logits bytes
  cmp -s "$d/$1.ids" "$d/$2.ids" && cmp -s "$d/$1.logits" "$d/$2.logits" ||
    fail "$2 differs from $1: $(cat "$d/$1.ids") / $(cat "$d/$2.ids")"
}

run plain
run model --drive-model 200MB/s,100us --trace "$d/trace.json"
run sync --sync --predict off
run sync_model --sync --predict off --drive-model 1GB/s,80us
run pread_model --io pread --drive-model 500MiB/s
same plain model
same plain sync
same plain sync_model
same plain pread_model

line=$(grep "drive model" "$d/model.err")
[[ $line =~ ^k3-uring:\ drive\ model\ 200\ MB/s,\ 100\ us\ per\ drive:\ [1-9][0-9]*\ reads,\ mean\ [0-9.]+\ ms\ modelled\ against\ [0-9.]+\ ms\ by\ the\ storage ]] ||
  fail "the model's statistics line: $line"
grep -q "drive model" "$d/plain.err" && fail "a statistics line about a model without one"
# every read is held at least 100 us past its start, so the modelled mean is at least that
awk '/drive model/ { for (i = 1; i <= NF; i++) if ($i == "mean") m = $(i + 1) } END { exit !(m >= 0.1) }' \
  "$d/model.err" || fail "modelled mean under the latency: $line"

# the trace: reads as the engine saw them, and as the storage served them
tail -c 4 "$d/trace.json" | grep -q ']}' || fail "the trace is not closed"
for track in "drive 0 reads" "drive 1 reads" "drive 0 storage" "drive 1 storage"; do
  grep -q "\"name\":\"$track\"" "$d/trace.json" || fail "no \"$track\" track in the trace"
done
[[ $(grep -c '"cat":"storage"' "$d/trace.json") -eq $(grep -c '"cat":"read"' "$d/trace.json") ]] ||
  fail "storage spans $(grep -c '"cat":"storage"' "$d/trace.json") against read spans $(grep -c '"cat":"read"' "$d/trace.json")"
if [[ -x /usr/bin/python3 ]]; then
  /usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$d/trace.json" ||
    fail "the trace is not JSON"
fi

"$K3" iobench --drives "$drives" --tokens 2 --no-cache --drive-model 1GB/s,50us >"$d/io.csv" 2>"$d/io.err" ||
  fail "iobench exited $?: $(cat "$d/io.err")"
grep -q "^k3-uring iobench: drive model 1 GB/s, 50 us per drive: [1-9]" "$d/io.err" ||
  fail "iobench's model line: $(cat "$d/io.err")"

expect_error 2 "--drive-model: \"fast\": rate \"fast\" is not" "$K3" run --drives "$drives" --ids 5 -n 1 --drive-model fast
expect_error 2 "--drive-model: \"7GB/s,80\": latency \"80\" is not a time" "$K3" run --drives "$drives" --ids 5 -n 1 --drive-model 7GB/s,80
expect_error 2 "--drive-model needs --drives" "$K3" run -m "$(tiny_model)" --ids 5 -n 1 --drive-model 7GB/s
expect_error 2 "--drive-model: \"0GB/s\"" "$K3" iobench --drives "$drives" --drive-model 0GB/s
finish
