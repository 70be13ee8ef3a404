#!/bin/bash
# The determinism contract over the read path: k3-tiny packed on 1, 2 and 3 drives, run
# at the floor, an ample budget and --ram auto (what the machine gives), 1 and 2
# threads, io_uring and the pread pool, expert cache off and on (72 runs), then prediction off and on for every k', gives logits and
# tokens byte-identical to the checkpoint folder's.  The checkpoint folder streamed from
# its shards (-m DIR) takes the same dial: floor and ample budget, io_uring and pread,
# cache off and on, one record at a time (--sync), all the same bytes; so do prompt passes
# of any size (-b).  (io_uring disabled by sysctl: io_uring_disabled.sh.)
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/stream-matrix"
rm -rf "$d" && mkdir -p "$d"
ids=5,17,300,1200,42,7,999,2031,0,64,1024,2032,33,34,35,36,37
args=(--ids $ids -n 12 --ignore-eos --print-ids)
"$K3" run -m "$m" "${args[@]}" -q --logits-out "$d/want.f32" >"$d/want.ids" || fail "checkpoint run"
for n in 1 2 3; do
  list=$(for i in $(seq 1 $n); do mkdir -p "$d/n$n/d$i"; echo "$d/n$n/d$i"; done | paste -sd,)
  "$K3" pack --checkpoint "$m" --drives "$list" -q 2>/dev/null || fail "pack on $n drives"
  for ram in floor 256M auto; do
    for t in 1 2; do
      for io in uring pread; do
        for cache in on off; do
          extra=() && [[ $cache == off ]] && extra=(--no-cache)
          same_as_want "drives=$n ram=$ram threads=$t io=$io cache=$cache" \
            --drives "$list" --ram $ram -t $t --io $io "${extra[@]}"
        done
      done
    done
  done
done
echo "48 configurations compared with the checkpoint run"

for ram in floor 256M; do
  for io in uring pread; do
    for cache in on off; do
      for sync in off on; do
        extra=() && [[ $cache == off ]] && extra=(--no-cache)
        [[ $sync == on ]] && extra+=(--sync)
        same_as_want "-m DIR ram=$ram io=$io cache=$cache sync=$sync" -m "$m" --ram $ram --io $io "${extra[@]}"
      done
    done
  done
done
echo "16 configurations of -m DIR (the shards streamed) compared with the packed runs'"

# Prediction changes what is read ahead, never the bytes computed.
for pred in "--predict off" "--prefetch-k 16" "--prefetch-k 20" "--prefetch-k 32" \
            "--predict-from moe-input" "--predict-from layer-output" "--prefetch-k 32 --ram floor" \
            "--prefetch-depth 1" "--prefetch-depth 64"; do
  # shellcheck disable=SC2086
  same_as_want "$pred" --drives "$d/n3/d1,$d/n3/d2,$d/n3/d3" --no-cache $pred
done
echo "prediction off and on (k' 16, 20, 24, 32; three hidden states; prefetch depth 1, 2, 64) compared"

# A prompt's passes change how many rows a layer takes at once, never the bytes.
for pass in "-b 1" "-b 5 --ram floor" "-b 6 --sync" "-b 16 -t 1 --no-cache"; do
  # shellcheck disable=SC2086
  same_as_want "$pass" --drives "$d/n3/d1,$d/n3/d2,$d/n3/d3" $pass
done
echo "prompt passes of 1, 5, 6 and 16 rows compared"
finish
