/* libFuzzer: a shard header and an index, as parsed from untrusted checkpoint files. */
#include <stdint.h>
#include <string.h>

#include "engine/model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k3_err err;
    struct k3_st_header h;
    /* The first 8 bytes pick the data section size the header is checked against. */
    uint64_t data_size = 0;
    if (size >= 8) {
        memcpy(&data_size, data, 8);
        data_size %= 1u << 30;
        data += 8;
        size -= 8;
    }
    if (!k3_st_parse(&h, "fuzz.safetensors", (const char *)data, size, data_size, &err))
        k3_st_header_free(&h);
    struct k3_st_index_entry *entries;
    int n;
    if (!k3_st_parse_index("fuzz.index.json", (const char *)data, size, &entries, &n, &err))
        k3_st_index_free(entries, n);
    return 0;
}
