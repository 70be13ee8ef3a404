/* libFuzzer: tiktoken.model and tokenizer_config.json contents (split at the first NUL),
 * then encoding and decoding with whatever loaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t ranks_len = nul ? (size_t)(nul - data) : size;
    const char *cfg = nul ? (const char *)nul + 1 : NULL;
    size_t cfg_len = nul ? size - ranks_len - 1 : 0;
    struct k3_tokenizer *tok;
    struct k3_err err;
    if (k3_tok_load_mem(&tok, "fuzz", data, ranks_len, cfg, cfg_len, 0, NULL, &err))
        return 0;
    static const char text[] = "Hello, world! <|open|>caf\xc3\xa9 123 \xe4\xb8\xad\xe6\x96\x87  \n";
    for (int special = 0; special < 2; special++) {
        int32_t *ids;
        size_t n;
        if (!k3_tok_encode(tok, text, sizeof text - 1, special, &ids, &n, &err)) {
            char *out;
            size_t len;
            if (!k3_tok_decode(tok, ids, n, &out, &len, &err))
                free(out);
            free(ids);
        }
    }
    k3_tok_free(tok);
    return 0;
}
