/* libFuzzer: config.json text. */
#include <stdint.h>

#include "engine/model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k3_config c;
    struct k3_err err;
    if (!k3_config_parse(&c, "fuzz/config.json", (const char *)data, size, &err))
        k3_config_free(&c);
    return 0;
}
