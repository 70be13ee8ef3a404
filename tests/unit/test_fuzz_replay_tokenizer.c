/* Inputs that crashed fuzz_tokenizer, replayed. */
#define HARNESS "fuzz_tokenizer"
#include "tests/fuzz/fuzz_tokenizer.c"
#include "tests/fuzz/replay.h"
