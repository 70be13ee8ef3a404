/* A request body's JSON fields as the API files read them (api_chat.c, anthropic.c):
 * absent and null are the same, and a string is compared whole.
 * Owns: k3_json_given and k3_json_is.  Does not own: what a field means or its checks
 * (the API files). */
#ifndef K3_SERVE_JSON_FIELDS_H
#define K3_SERVE_JSON_FIELDS_H

#include <stdbool.h>
#include <string.h>

#include <jansson.h>

/* obj.name, or NULL when it is absent or null ("the default"). */
static inline json_t *k3_json_given(const json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    return json_is_null(v) ? NULL : v;
}

/* v is the string s. */
static inline bool k3_json_is(const json_t *v, const char *s)
{
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

#endif
