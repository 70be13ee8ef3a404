/* Inputs that crashed fuzz_manifest, and small manifests that reach every table check,
 * replayed. */
#define HARNESS "fuzz_manifest"
#include "tests/fuzz/fuzz_manifest.c"
#include "tests/fuzz/replay.h"
