/* fuzz_safetensors's committed corpus, replayed: a minimized cover of what the fuzzer
 * reached, and any input that ever crashed it (tests/fuzz/README.md). */
#define HARNESS "fuzz_safetensors"
#include "tests/fuzz/fuzz_safetensors.c"
#include "tests/fuzz/replay.h"
