/* fuzz_chat_request's committed corpus, replayed: named seeds (requests of the golden
 * cases and strict refusals), and any input that ever crashed it (tests/fuzz/README.md). */
#define HARNESS "fuzz_chat_request"
#include "tests/fuzz/fuzz_chat_request.c"
#include "tests/fuzz/replay.h"
