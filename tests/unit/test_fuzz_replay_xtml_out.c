/* fuzz_xtml_out's committed corpus, replayed: named seeds that show the markup, a
 * minimized cover of what the fuzzer reached, and any input that ever crashed it
 * (tests/fuzz/README.md). */
#define HARNESS "fuzz_xtml_out"
#include "tests/fuzz/fuzz_xtml_out.c"
#include "tests/fuzz/replay.h"
