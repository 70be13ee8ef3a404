#!/bin/bash
# The environment variables (engine/cli/env.h): each one's empty or malformed value is a
# usage error before any work, one line naming the variable and the value; k3-uring
# --help, run --help and serve --help list every one; a good value reaches the library
# (K3_MXFP4_ACT=q8 changes the logits, f32 and K3_KERNELS=scalar do not).
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/env"
mkdir -p "$d"
vars=(K3_FAULTS K3_FAULTS_SEED K3_KERNELS K3_MXFP4_ACT K3_TOPOLOGY K3_RANK_FAULT K3_CHECK_CACHE)

for help in "$("$K3" --help)" "$("$K3" run --help)" "$("$K3" serve --help)"; do
  grep -q "^environment:" <<<"$help" || fail "a --help has no environment section"
  for v in "${vars[@]}"; do
    grep -q "^  $v=" <<<"$help" || fail "a --help does not list $v"
  done
done

for v in "${vars[@]}"; do
  expect_error 2 "$v: an empty value" env "$v=" "$K3" run -m "$m" --ids 5
done
bad() { expect_error 2 "$1" env "$2" "$K3" run -m "$m" --ids 5; }
bad 'K3_FAULTS: eio: is not a probability' K3_FAULTS=eio:
bad 'K3_FAULTS: short:0.1x is not a probability' K3_FAULTS=short:0.1x
bad 'K3_FAULTS: drive-loss: is not DRIVE[@READS]' K3_FAULTS=drive-loss:
bad 'K3_FAULTS: drive-loss:1@ is not DRIVE[@READS]' K3_FAULTS=drive-loss:1@
bad 'K3_FAULTS: unknown kind "eioo"' K3_FAULTS=eioo:0.1
bad 'K3_FAULTS: "" is not kind:value' K3_FAULTS=eio:0.1,,short:0.1
bad 'K3_FAULTS_SEED: "12x" is not a non-negative integer' K3_FAULTS_SEED=12x
bad 'K3_FAULTS_SEED: "-1" is not a non-negative integer' K3_FAULTS_SEED=-1
bad 'K3_KERNELS: "avx512f" is not auto, avx512vnni, avx512, avx2 or scalar' K3_KERNELS=avx512f
bad 'K3_MXFP4_ACT: "int8" is not f32 or q8' K3_MXFP4_ACT=int8
bad 'K3_TOPOLOGY=numa:2: want synthetic:STRING or xml:FILE' K3_TOPOLOGY=numa:2
bad 'K3_TOPOLOGY=synthetic:: want synthetic:STRING or xml:FILE' K3_TOPOLOGY=synthetic:
bad 'K3_TOPOLOGY=synthetic:pack:x: hwloc cannot load it' K3_TOPOLOGY=synthetic:pack:x
bad 'K3_TOPOLOGY=xml:/nonexistent.xml: hwloc cannot load it' K3_TOPOLOGY=xml:/nonexistent.xml
bad 'K3_RANK_FAULT=1:nap@3: want RANK:stall@STEP or RANK:exit@STEP' K3_RANK_FAULT=1:nap@3
bad 'K3_RANK_FAULT=1:stall@0: want RANK:stall@STEP or RANK:exit@STEP' K3_RANK_FAULT=1:stall@0
bad 'K3_RANK_FAULT=x:exit@2: want RANK:stall@STEP or RANK:exit@STEP' K3_RANK_FAULT=x:exit@2

gen() { env "$@" "$K3" run -m "$m" --ids 5,17,300 -n 2 -q --logits-out "$d/$1.f32" >/dev/null ||
        fail "$* run failed"; }
gen K3_MXFP4_ACT=f32
gen K3_MXFP4_ACT=q8
gen K3_KERNELS=scalar
gen K3_FAULTS_SEED=7
cmp -s "$d/K3_MXFP4_ACT=f32.f32" "$d/K3_FAULTS_SEED=7.f32" || fail "K3_MXFP4_ACT=f32 changed the logits"
cmp -s "$d/K3_KERNELS=scalar.f32" "$d/K3_FAULTS_SEED=7.f32" || fail "K3_KERNELS=scalar changed the logits"
cmp -s "$d/K3_MXFP4_ACT=q8.f32" "$d/K3_FAULTS_SEED=7.f32" && fail "K3_MXFP4_ACT=q8 did not reach the kernels"
finish
