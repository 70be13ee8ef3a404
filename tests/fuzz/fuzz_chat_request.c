/* libFuzzer: an OpenAI chat request body through the chat renderer, strict (as serve
 * renders it) and as the bare encoder, joined into its prompt. */
#include <stdint.h>
#include <stdlib.h>

#include "engine/text/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *req = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    struct k3_chat_opts o;
    struct k3_chat_fault fault;
    for (int strict = 1; req && strict >= 0 && !k3_chat_request_opts(req, &o, &fault); strict--) {
        o.strict = strict;
        struct k3_chat_segs segs = {0};
        size_t len;
        if (!k3_chat_render(json_object_get(req, "messages"), json_object_get(req, "tools"), &o,
                            &segs, &fault))
            free(k3_chat_segs_join(&segs, &len));
        k3_chat_segs_free(&segs);
    }
    json_decref(req);
    return 0;
}
