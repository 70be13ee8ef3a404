/* fuzz_config's committed corpus, replayed: a minimized cover of what the fuzzer
 * reached, and any input that ever crashed it (tests/fuzz/README.md). */
#define HARNESS "fuzz_config"
#include "tests/fuzz/fuzz_config.c"
#include "tests/fuzz/replay.h"
