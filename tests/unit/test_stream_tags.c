/* Read tags (engine/stream/stream_internal.h): what a completion belongs to comes back as
 * it was made, every field at its extremes beside the others at theirs; and the slot field
 * holds every record of full K3 (82,432, more than 16 bits can name), so a budget that
 * caches them all gets a slot for each. */
#include <stdio.h>

#include "engine/model/config.h"
#include "engine/stream/stream_internal.h"
#include "tests/check.h"

static void round_trips(void)
{
    static const enum owner kinds[] = {OWN_SEGMENT, OWN_SLOT, OWN_RECORD, OWN_EMBED};
    static const uint32_t hows[] = {0, 1, TRIES_MASK, SPECULATIVE, FROM_REPLICA | SPECULATIVE | TRIES_MASK};
    static const uint32_t indexes[] = {0, 1, 65535, 65536, 82431, MAX_OWNER_INDEX};
    static const uint32_t pieces[] = {0, 1, 0x80000000u, 0xffffffffu};
    int n = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t h = 0; h < sizeof hows / sizeof *hows; h++)
            for (size_t i = 0; i < sizeof indexes / sizeof *indexes; i++)
                for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++, n++) {
                    uint64_t t = make_tag(kinds[k], hows[h], indexes[i], pieces[p]);
                    CHECK(tag_owner(t) == kinds[k] && tag_how(t) == hows[h] &&
                              tag_index(t) == indexes[i] && tag_piece(t) == pieces[p],
                          "tag (%d, 0x%x, %u, %u) came back as (%d, 0x%x, %u, %u)", kinds[k],
                          hows[h], indexes[i], pieces[p], tag_owner(t), tag_how(t),
                          tag_index(t), tag_piece(t));
                }
    printf("%d tags made and read back\n", n);
}

static void full_k3_fits(void)
{
    struct k3_config cfg;
    struct k3_err err;
    REQUIRE(k3_config_named(&cfg, "k3", &err) == 0, "%s", err.msg);
    long records = (long)k3_moe_layer_count(&cfg) * cfg.n_experts;
    CHECK(records <= (long)MAX_OWNER_INDEX, "full K3 has %ld records, a tag holds %u slots",
          records, MAX_OWNER_INDEX);
    printf("full K3: %ld records; a tag names up to %u slots\n", records, MAX_OWNER_INDEX);
    k3_config_free(&cfg);
}

int main(void)
{
    round_trips();
    full_k3_fits();
    return check_result();
}
