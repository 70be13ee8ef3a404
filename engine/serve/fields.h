/* The request fields of OpenAI's and llama-server's completion APIs, and what this server
 * does with each: read (api.c, or here: logit_bias and the penalties), refused with a 400
 * naming it unless it has the value that turns it off, or accepted and ignored for a
 * stated reason.  A field in no row is refused as unknown, as OpenAI does.
 * docs/serving.md shows the same table to users; tests/cli/serve_fields.sh sends every
 * row of it.
 * Owns: the table, the check of a body's top-level fields against it, and the parsing of
 * logit_bias, presence_penalty and frequency_penalty.
 * Does not own: the other fields' parsing (api.c), sampling (forward/sampler.h).
 */
#ifndef K3_SERVE_FIELDS_H
#define K3_SERVE_FIELDS_H

#include <jansson.h>

#include "engine/serve/api.h"

#define K3_API_MAX_LOGIT_BIAS 1024 /* entries of logit_bias, at most (each costs a sample) */

/* 0, or -1 with e naming the first field that is unknown, of the other endpoint, or
 * refused. */
int k3_api_fields_check(enum k3_api_kind kind, json_t *root, struct k3_api_error *e);
/* logit_bias (token id to a bias in [-100, 100]), presence_penalty and frequency_penalty
 * (in [-2, 2]) into p: 0, or -1 with e filled (p->bias is malloc'd, freed by
 * k3_api_request_free). */
int k3_api_parse_adjust(const struct k3_api_model *m, json_t *root, struct k3_gen_params *p,
                        struct k3_api_error *e);

#endif
