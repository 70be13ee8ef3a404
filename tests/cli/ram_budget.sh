#!/bin/bash
# --ram: peak RSS stays under the budget, measured at the floor and at the budget that
# holds the whole trunk, on a model whose trunk (about 160 MB, two 67 MB embedding and
# lm_head matrices) dominates the runtime, packed (--drives) and as a checkpoint folder
# (-m DIR, streamed from its shards alike); a budget under the floor is refused with the
# floor named; every budget gives the same bytes.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/ram-budget"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" synth --config "$K3_ROOT/tests/configs/k3-mid.json" --seed 1 --out "$d/model" -q || fail "synth"
"$K3" pack --checkpoint "$d/model" --drives "$d/a,$d/b" -q 2>/dev/null || fail "pack"
gen=(--ids 5,17,300,1200,42 -n 8 --ignore-eos --print-ids -v)
args=(--drives "$d/a,$d/b" "${gen[@]}")
for model in drives ckpt; do
  from=(--drives "$d/a,$d/b") && [[ $model == ckpt ]] && from=(-m "$d/model")
  for ram in floor trunk; do
    name="$model --ram $ram"
    "$K3" run "${from[@]}" "${gen[@]}" --ram $ram --logits-out "$d/$model-$ram.f32" >/dev/null \
      2>"$d/$model-$ram.log" || { fail "$name: $(cat "$d/$model-$ram.log")"; continue; }
    budget=$(sed -n 's/.*budget [0-9.]* GiB = \([0-9]*\) B.*/\1/p' "$d/$model-$ram.log")
    rss_mb=$(sed -n 's/.*peak RSS \([0-9]*\) MB.*/\1/p' "$d/$model-$ram.log")
    [[ -n "$budget" && -n "$rss_mb" ]] || { fail "$name: no budget or RSS in: $(cat "$d/$model-$ram.log")"; continue; }
    echo "$name: budget $((budget / 1048576)) MiB, peak RSS $rss_mb MiB"
    ((rss_mb * 1048576 <= budget)) || fail "$name: peak RSS $rss_mb MiB exceeds the budget $((budget / 1048576)) MiB"
    cmp -s "$d/drives-floor.f32" "$d/$model-$ram.f32" || fail "$name: logits differ from the packed floor's"
  done
done

# The expert cache: with room for every record, later tokens hit it (a hit is a read
# avoided: the bytes read per token drop); --no-cache reads every record every time.
hits() { sed -n 's/.*token [0-9]*:.* records read, \([0-9]*\) cache hits.*/\1/p' "$1" | tail -1; }
"$K3" run "${args[@]}" --ram 512M --stats >/dev/null 2>"$d/cache.log" || fail "cache run"
"$K3" run "${args[@]}" --ram 512M --stats --no-cache >/dev/null 2>"$d/nocache.log" || fail "no-cache run"
[[ $(hits "$d/cache.log") -gt 0 ]] || fail "no cache hits with 512M: $(grep 'token 7' "$d/cache.log")"
[[ $(hits "$d/nocache.log") -eq 0 ]] || fail "hits with --no-cache: $(grep 'token 7' "$d/nocache.log")"
# The read area is taken as reads reach it: the cache's records take pieces the
# no-cache run, reading into the same in-flight slots, never reaches.
taken() { sed -n 's/^k3-uring: read area: \([0-9.]*\) MB taken.*/\1/p' "$1"; }
awk -v c="$(taken "$d/cache.log")" -v n="$(taken "$d/nocache.log")" 'BEGIN { exit !(n > 0 && c > n) }' ||
  fail "area taken: with a cache $(taken "$d/cache.log") MB, without $(taken "$d/nocache.log") MB"
echo "cache: $(grep 'token 7:' "$d/cache.log" | sed 's/k3-uring: //')"
echo "no cache: $(grep 'token 7:' "$d/nocache.log" | sed 's/k3-uring: //')"
grep -q "5 streamed segments" "$d/drives-floor.log" || fail "at the floor the layers should stream: $(grep slots "$d/drives-floor.log")"
expect_error 1 "is below the floor of" "$K3" run --drives "$d/a,$d/b" --ids 5 -n 1 --ram 64M -q
expect_error 1 "is below the floor of" "$K3" run -m "$d/model" --ids 5 -n 1 --ram 64M -q
expect_error 2 "--ram: \"lots\" is not a size" "$K3" run --drives "$d/a,$d/b" --ids 5 --ram lots
finish
