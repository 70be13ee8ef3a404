/* Inputs that crashed fuzz_schema, and seeds that show its format, replayed. */
#define HARNESS "fuzz_schema"
#include "tests/fuzz/fuzz_schema.c"
#include "tests/fuzz/replay.h"
