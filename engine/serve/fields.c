#include "engine/serve/fields.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

enum use { READ, REFUSED, IGNORED };
enum { CHAT = 1, COMPLETION = 2, BOTH = 3 };

struct field {
    const char *name;
    unsigned kinds;        /* CHAT, COMPLETION or BOTH */
    enum use use;
    const char *off[2];    /* REFUSED: the JSON values accepted (the feature off); null always is */
    const char *why;       /* REFUSED: what is not here; IGNORED: why it does not matter */
};

/* Every field either API defines (OpenAI's chat and legacy completions, llama-server's
 * /completion and its OpenAI routes), in docs/serving.md's order. */
static const struct field fields[] = {
    /* read by api.c (echo, logprobs, suffix, n and best_of refused there unless off),
     * api_chat.c (the chat fields K3's agents send) or below */
    {"model", BOTH, READ, {NULL}, NULL}, {"messages", CHAT, READ, {NULL}, NULL}, {"prompt", COMPLETION, READ, {NULL}, NULL},
    {"max_tokens", BOTH, READ, {NULL}, NULL}, {"max_completion_tokens", BOTH, READ, {NULL}, NULL},
    {"temperature", BOTH, READ, {NULL}, NULL}, {"top_p", BOTH, READ, {NULL}, NULL}, {"top_k", BOTH, READ, {NULL}, NULL},
    {"seed", BOTH, READ, {NULL}, NULL}, {"stop", BOTH, READ, {NULL}, NULL}, {"stream", BOTH, READ, {NULL}, NULL},
    {"stream_options", BOTH, READ, {NULL}, NULL}, {"logit_bias", BOTH, READ, {NULL}, NULL},
    {"presence_penalty", BOTH, READ, {NULL}, NULL}, {"frequency_penalty", BOTH, READ, {NULL}, NULL},
    {"ignore_eos", BOTH, READ, {NULL}, NULL}, {"cache_prompt", BOTH, READ, {NULL}, NULL}, {"logits_hash", BOTH, READ, {NULL}, NULL},
    {"n", BOTH, READ, {NULL}, NULL}, {"best_of", COMPLETION, READ, {NULL}, NULL}, {"echo", COMPLETION, READ, {NULL}, NULL},
    {"suffix", COMPLETION, READ, {NULL}, NULL}, {"logprobs", BOTH, READ, {NULL}, NULL}, {"tools", CHAT, READ, {NULL}, NULL},
    {"functions", CHAT, READ, {NULL}, NULL}, {"function_call", CHAT, READ, {NULL}, NULL},
    {"tool_choice", CHAT, READ, {NULL}, NULL}, {"parallel_tool_calls", CHAT, READ, {NULL}, NULL},
    {"response_format", CHAT, READ, {NULL}, NULL}, {"reasoning_effort", CHAT, READ, {NULL}, NULL},
    {"chat_template_kwargs", CHAT, READ, {NULL}, NULL}, {"add_generation_prompt", CHAT, READ, {NULL}, NULL},
    /* OpenAI's, refused unless off */
    {"top_logprobs", CHAT, REFUSED, {"0"}, "log probabilities are not returned"},
    {"verbosity", CHAT, REFUSED, {"\"medium\""}, "the answer's length is not steered"},
    {"modalities", CHAT, REFUSED, {"[\"text\"]"}, "only text comes out"},
    {"audio", CHAT, REFUSED, {NULL}, "only text comes out"},
    {"prediction", CHAT, REFUSED, {NULL}, "predicted outputs are not supported"},
    {"web_search_options", CHAT, REFUSED, {NULL}, "there is no web search"},
    /* OpenAI's, accepted and ignored */
    {"user", BOTH, IGNORED, {NULL}, "an end-user id for OpenAI's abuse monitoring; none is kept"},
    {"safety_identifier", CHAT, IGNORED, {NULL}, "as user"},
    {"metadata", CHAT, IGNORED, {NULL}, "tags for stored completions; nothing is stored"},
    {"store", CHAT, IGNORED, {NULL}, "nothing is stored for later retrieval"},
    {"service_tier", CHAT, IGNORED, {NULL}, "there is one tier"},
    {"prompt_cache_key", CHAT, IGNORED, {NULL}, "the prompt store finds a shared prefix by itself"},
    {"prompt_cache_retention", CHAT, IGNORED, {NULL}, "the prompt store keeps states within --cache-ram"},
    /* llama-server's, refused unless off */
    {"n_predict", BOTH, REFUSED, {NULL}, "use max_tokens"},
    {"min_p", BOTH, REFUSED, {"0"}, "min-p sampling is not here"},
    {"typical_p", BOTH, REFUSED, {"1"}, "typical sampling is not here"},
    {"top_n_sigma", BOTH, REFUSED, {"-1"}, "top-n-sigma sampling is not here"},
    {"dynatemp_range", BOTH, REFUSED, {"0"}, "dynamic temperature is not here"},
    {"repeat_penalty", BOTH, REFUSED, {"1"}, "use presence_penalty or frequency_penalty"},
    {"mirostat", BOTH, REFUSED, {"0"}, "Mirostat sampling is not here"},
    {"dry_multiplier", BOTH, REFUSED, {"0"}, "DRY sampling is not here"},
    {"xtc_probability", BOTH, REFUSED, {"0"}, "XTC sampling is not here"},
    {"samplers", BOTH, REFUSED, {NULL}, "the samplers' order is fixed: top_k, top_p, temperature"},
    {"min_keep", BOTH, REFUSED, {"0"}, "top_k and top_p keep what they keep"},
    {"grammar", BOTH, REFUSED, {"\"\""}, "GBNF grammars are not read: use response_format or tool_choice"},
    {"json_schema", BOTH, REFUSED, {NULL}, "use response_format's json_schema"},
    {"n_probs", BOTH, REFUSED, {"0"}, "probabilities are not returned"},
    {"post_sampling_probs", BOTH, REFUSED, {"false"}, "probabilities are not returned"},
    {"return_tokens", BOTH, REFUSED, {"false"}, "token ids are not returned"},
    {"return_progress", BOTH, REFUSED, {"false"}, "prompt progress is not streamed"},
    {"timings_per_token", BOTH, REFUSED, {"false"}, "timings are not returned"},
    {"response_fields", BOTH, REFUSED, {NULL}, "the response's fields are OpenAI's"},
    {"n_indent", BOTH, REFUSED, {"0"}, "indentation is not enforced"},
    {"n_cmpl", BOTH, REFUSED, {"1"}, "one choice per request"},
    {"t_max_predict_ms", BOTH, REFUSED, {"0"}, "use max_tokens"},
    {"lora", BOTH, REFUSED, {"[]"}, "there are no LoRA adapters"},
    {"multimodal_data", BOTH, REFUSED, {NULL}, "only text goes in"},
    {"image_data", BOTH, REFUSED, {NULL}, "only text goes in"},
    {"reasoning_format", CHAT, IGNORED, {NULL}, "K3's thinking always comes back apart, as reasoning_content"},
    /* llama-server's, accepted and ignored */
    {"dynatemp_exponent", BOTH, IGNORED, {NULL}, "a setting of dynatemp_range, which is off"},
    {"repeat_last_n", BOTH, IGNORED, {NULL}, "a setting of repeat_penalty, which is off"},
    {"mirostat_tau", BOTH, IGNORED, {NULL}, "a setting of mirostat, which is off"},
    {"mirostat_eta", BOTH, IGNORED, {NULL}, "a setting of mirostat, which is off"},
    {"dry_base", BOTH, IGNORED, {NULL}, "a setting of dry_multiplier, which is off"},
    {"dry_allowed_length", BOTH, IGNORED, {NULL}, "a setting of dry_multiplier, which is off"},
    {"dry_penalty_last_n", BOTH, IGNORED, {NULL}, "a setting of dry_multiplier, which is off"},
    {"dry_sequence_breakers", BOTH, IGNORED, {NULL}, "a setting of dry_multiplier, which is off"},
    {"xtc_threshold", BOTH, IGNORED, {NULL}, "a setting of xtc_probability, which is off"},
    {"n_keep", BOTH, IGNORED, {NULL}, "the context is never shifted: a prompt that does not fit is refused"},
    {"n_cache_reuse", BOTH, IGNORED, {NULL}, "the prompt store resumes whole prefixes"},
    {"id_slot", BOTH, IGNORED, {NULL}, "the scheduler gives each request a free sequence"},
    {"sse_ping_interval", BOTH, IGNORED, {NULL}, "a stream's first chunk goes out at once"},
};

static const struct field *find(const char *name)
{
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!strcmp(fields[i].name, name))
            return &fields[i];
    return NULL;
}

/* v is one of f's off values (numbers compared as numbers: 0 and 0.0 alike). */
static bool is_off(const struct field *f, json_t *v)
{
    for (int i = 0; i < 2 && f->off[i]; i++) {
        json_t *off = json_loads(f->off[i], JSON_DECODE_ANY, NULL);
        bool same = json_is_number(off) && json_is_number(v)
                        ? json_number_value(off) == json_number_value(v)
                        : json_equal(off, v);
        json_decref(off);
        if (same)
            return true;
    }
    return false;
}

int k3_api_fields_check(enum k3_api_kind kind, json_t *root, struct k3_api_error *e)
{
    unsigned mine = kind == K3_API_CHAT ? CHAT : COMPLETION;
    const char *here = kind == K3_API_CHAT ? "/v1/chat/completions" : "/v1/completions";
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        const struct field *f = find(key);
        if (!f)
            return k3_api_errorf(e, 400, INVALID, key, "%.64s is not a field of %s (docs/serving.md "
                                 "lists the fields this server takes)", key, here);
        if (!(f->kinds & mine))
            return k3_api_errorf(e, 400, INVALID, key, "%s is a field of %s, not of %s", key,
                                 f->kinds == CHAT ? "/v1/chat/completions" : "/v1/completions",
                                 here);
        if (f->use == REFUSED && !json_is_null(v) && !is_off(f, v))
            return k3_api_errorf(e, 400, INVALID, key, "%s is not supported by this server: %s",
                                 key, f->why);
    }
    return 0;
}

/* ---- logit_bias and the penalties ---------------------------------------------------- */

/* A token id as OpenAI's keys spell it: decimal digits, in [0, vocab). */
static bool token_key(const char *key, int vocab, int32_t *id)
{
    size_t n = strlen(key);
    if (!n || n > 10 || strspn(key, "0123456789") != n)
        return false;
    long long x = strtoll(key, NULL, 10);
    *id = (int32_t)x;
    return x < vocab;
}

static int parse_bias(const struct k3_api_model *m, json_t *root, struct k3_gen_params *p,
                      struct k3_api_error *e)
{
    json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return k3_api_errorf(e, 400, INVALID, "logit_bias", "logit_bias must be an object of token "
                             "ids (as strings) to biases in [-100, 100]");
    size_t n = json_object_size(v);
    if (n > K3_API_MAX_LOGIT_BIAS)
        return k3_api_errorf(e, 400, INVALID, "logit_bias", "logit_bias has %zu entries; at most %d",
                             n, K3_API_MAX_LOGIT_BIAS);
    if (n && !(p->bias = malloc(sizeof *p->bias * n)))
        return k3_api_errorf(e, 500, "server_error", NULL, "out of memory");
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b) {
        struct k3_logit_bias *out = &p->bias[p->n_bias];
        if (!token_key(key, m->vocab, &out->id))
            return k3_api_errorf(e, 400, INVALID, "logit_bias", "logit_bias: \"%.32s\" is not a "
                                 "token id in [0, %d)", key, m->vocab);
        double x = json_number_value(b);
        if (!json_is_number(b) || !(x >= -100 && x <= 100))
            return k3_api_errorf(e, 400, INVALID, "logit_bias", "logit_bias[\"%s\"] must be a "
                                 "number in [-100, 100]", key);
        out->bias = (float)x;
        p->n_bias++;
    }
    return 0;
}

static int parse_penalty(json_t *root, const char *name, float *out, struct k3_api_error *e)
{
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v))
        return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || !(x >= -2 && x <= 2))
        return k3_api_errorf(e, 400, INVALID, name, "%s must be a number in [-2, 2]", name);
    *out = (float)x;
    return 0;
}

int k3_api_parse_adjust(const struct k3_api_model *m, json_t *root, struct k3_gen_params *p,
                        struct k3_api_error *e)
{
    return parse_bias(m, root, p, e) ||
                   parse_penalty(root, "presence_penalty", &p->presence_penalty, e) ||
                   parse_penalty(root, "frequency_penalty", &p->frequency_penalty, e)
               ? -1
               : 0;
}
