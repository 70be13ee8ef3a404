#include "engine/base/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int k3_parse_size(const char *text, uint64_t *bytes)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0))
        return -1;
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' && end[1] == 'B' ? 2 : 1;
    if (*end || v * mult > 1.8e19)
        return -1;
    *bytes = (uint64_t)(v * mult);
    return 0;
}

static int set_value(const struct k3_opt *o, const char *flag, const char *val, struct k3_err *err)
{
    char *end;
    switch (o->type) {
    case K3_OPT_STRING:
        *(const char **)o->dst = val;
        return 0;
    case K3_OPT_INT: {
        errno = 0;
        long v = strtol(val, &end, 10);
        if (end == val || *end || errno)
            return k3_errf(err, "%s: \"%s\" is not an integer", flag, val);
        if (v < o->min || v > o->max)
            return k3_errf(err, "%s: %ld is outside [%.0f, %.0f]", flag, v, o->min, o->max);
        *(int *)o->dst = (int)v;
        return 0;
    }
    case K3_OPT_U64: {
        errno = 0;
        unsigned long long v = strtoull(val, &end, 10);
        if (end == val || *end || errno || *val == '-')
            return k3_errf(err, "%s: \"%s\" is not a non-negative integer", flag, val);
        *(uint64_t *)o->dst = v;
        return 0;
    }
    case K3_OPT_FLOAT: {
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v))
            return k3_errf(err, "%s: \"%s\" is not a number", flag, val);
        if (v < o->min || v > o->max)
            return k3_errf(err, "%s: %g is outside [%g, %g]", flag, v, o->min, o->max);
        *(float *)o->dst = (float)v;
        return 0;
    }
    case K3_OPT_SIZE:
        if (k3_parse_size(val, (uint64_t *)o->dst))
            return k3_errf(err, "%s: \"%s\" is not a size (e.g. 512M, 8G)", flag, val);
        return 0;
    case K3_OPT_FLAG:
        *(bool *)o->dst = true;
        return 0;
    }
    return k3_errf(err, "%s: bad option table", flag);
}

int k3_opts_parse(const struct k3_opt *opts, int n_opts, int argc, char **argv,
                  const char *usage, struct k3_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            k3_opts_help(stdout, usage, opts, n_opts);
            return 1;
        }
        const struct k3_opt *o = NULL;
        const char *inline_val = NULL;
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (int k = 0; k < n_opts && !o; k++)
                if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len))
                    o = &opts[k];
            inline_val = eq ? eq + 1 : NULL;
        } else if (a[0] == '-' && a[1] && !a[2]) {
            for (int k = 0; k < n_opts && !o; k++)
                if (opts[k].short_name == a[1])
                    o = &opts[k];
        }
        if (!o)
            return k3_errf(err, "%s: unknown %s (see --help)", a,
                           a[0] == '-' ? "option" : "argument");
        if (o->type == K3_OPT_FLAG) {
            if (inline_val)
                return k3_errf(err, "%s: takes no value", a);
            if (set_value(o, a, NULL, err))
                return -1;
            continue;
        }
        const char *val = inline_val;
        if (!val) {
            if (i + 1 >= argc)
                return k3_errf(err, "%s: needs a value (%s)", a, o->arg ? o->arg : "VALUE");
            val = argv[++i];
        }
        if (set_value(o, a, val, err))
            return -1;
    }
    return 0;
}

/* The default an option shows in --help: the destination's value before parsing. */
static void default_text(const struct k3_opt *o, char *buf, size_t len)
{
    buf[0] = 0;
    switch (o->type) {
    case K3_OPT_STRING:
        if (*(const char **)o->dst)
            snprintf(buf, len, " (default %s)", *(const char **)o->dst);
        break;
    case K3_OPT_INT:
        snprintf(buf, len, " (default %d)", *(int *)o->dst);
        break;
    case K3_OPT_U64:
        snprintf(buf, len, " (default %llu)", (unsigned long long)*(uint64_t *)o->dst);
        break;
    case K3_OPT_FLOAT:
        snprintf(buf, len, " (default %g)", *(float *)o->dst);
        break;
    case K3_OPT_SIZE: {
        uint64_t v = *(uint64_t *)o->dst;
        if (v)
            snprintf(buf, len, " (default %.3gG)", v / 1073741824.0);
        break;
    }
    case K3_OPT_FLAG:
        break;
    }
}

void k3_opts_help(FILE *f, const char *usage, const struct k3_opt *opts, int n_opts)
{
    fprintf(f, "%s\n\noptions:\n", usage);
    for (int k = 0; k < n_opts; k++) {
        const struct k3_opt *o = &opts[k];
        char flag[64], def[96];
        if (o->short_name)
            snprintf(flag, sizeof flag, "-%c, --%s%s%s", o->short_name, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        else
            snprintf(flag, sizeof flag, "    --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        default_text(o, def, sizeof def);
        fprintf(f, "  %-28s %s%s\n", flag, o->help, def);
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}

int k3_parse_id_list(const char *flag, const char *text, int32_t **ids, int *n,
                     struct k3_err *err)
{
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    int32_t *out = malloc(cap * sizeof *out);
    if (!out)
        return k3_errf(err, "out of memory");
    int count = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(out);
            return k3_errf(err, "%s: \"%s\" is not a comma-separated list of token ids", flag,
                           text);
        }
        out[count++] = (int32_t)v;
        if (!*end)
            break;
        p = end + 1;
    }
    *ids = out;
    *n = count;
    return 0;
}
