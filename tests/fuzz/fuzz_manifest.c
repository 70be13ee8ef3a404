/* libFuzzer: a drive's manifest.  The checksum would stop almost every mutation at the
 * door, so the harness recomputes it: the fuzzer then reaches the table checks.
 *
 * Seeds: tests/fuzz/regressions/fuzz_manifest, whose whole manifests (mini-*) are a
 * synthetic model's of 2 layers, 4 experts, hidden 64 and vocabulary 512, its tokenizer
 * files removed, packed on one drive and on two with replicas (9-11 KB).  Seeded with a k3-tiny manifest (200 KB: 3,822 pieces
 * and their replicas) it ran ~600 inputs a second: libFuzzer hashes, copies and mutates
 * whole inputs, and every input walks every table entry; small seeds run ~20,000 a
 * second here and reach more of the checks in the same time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/pack/pack_format.h"
#include "engine/pack/packed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k3_err err;
    uint8_t *m = malloc(size + 1);
    if (!m)
        return 0;
    memcpy(m, data, size);
    if (size >= sizeof(struct k3_pack_header)) {
        struct k3_pack_header h;
        memcpy(&h, m, sizeof h);
        h.manifest_bytes = size;
        /* sections hash, as the writer does */
        XXH64_state_t *st = XXH64_createState();
        XXH64_reset(st, 0);
        for (uint32_t i = 0; i < h.n_sections && i < K3_PACK_MAX_SECTIONS; i++)
            if (h.sections[i].offset <= size && h.sections[i].bytes <= size - h.sections[i].offset)
                XXH64_update(st, m + h.sections[i].offset, h.sections[i].bytes);
        h.sections_xxh64 = XXH64_digest(st);
        XXH64_freeState(st);
        h.manifest_xxh64 = 0;
        memcpy(m, &h, sizeof h);
        h.manifest_xxh64 = XXH64(m, size, 0);
        memcpy(m, &h, sizeof h);
    }
    k3_pack_manifest_check(m, size, "fuzz/k3-uring.manifest", &err);
    free(m);
    return 0;
}
