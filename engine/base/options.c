#include "engine/base/options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const struct k3_opt_choice k3_opt_on_off[] = {{"on", 1}, {"off", 0}, {NULL, 0}};

/* ---- value syntaxes ------------------------------------------------------------------ */

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

/* bytes as k3_parse_size reads them: "100", "64K", "8G", "1.5G". */
static void format_size(uint64_t bytes, char *buf, size_t len)
{
    int u = 0; /* 1..4: K, M, G, T */
    while (u < 4 && bytes >= 1ull << (10 * (u + 1)))
        u++;
    uint64_t unit = 1ull << (10 * u);
    if (!u)
        snprintf(buf, len, "%llu", (unsigned long long)bytes);
    else if (bytes % unit == 0)
        snprintf(buf, len, "%llu%c", (unsigned long long)(bytes / unit), "KMGT"[u - 1]);
    else
        snprintf(buf, len, "%.3g%c", (double)bytes / (double)unit, "KMGT"[u - 1]);
}

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

int k3_parse_id_list(const char *flag, const char *text, int32_t **ids, int *n,
                     struct k3_err *err)
{
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    int32_t *out = malloc(cap * sizeof *out);
    if (!out)
        return k3_errf(err, "%s: out of memory", flag);
    int count = 0;
    const char *p = skip_space(text), *why = NULL;
    while (*p && !why) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || *p == '+' || *p == '-') {
            why = "bad id";
            break;
        }
        out[count++] = (int32_t)v;
        p = skip_space(end);
        if (*p && *p != ',')
            why = "expected ','";
        else if (*p && !*(p = skip_space(p + 1)))
            why = "bad id"; /* a comma promises another id */
    }
    if (why) {
        free(out);
        return k3_errf(err, "%s: \"%.60s\" is not a comma-separated list of token ids "
                            "(%s at \"%.20s\")", flag, text, why, p);
    }
    if (!count) {
        free(out);
        out = NULL;
    }
    *ids = out;
    *n = count;
    return 0;
}

/* ---- choices ------------------------------------------------------------------------- */

static const struct k3_opt_choice *choice_named(const struct k3_opt_choice *c, const char *name,
                                                size_t len)
{
    for (; c && c->name; c++)
        if (strlen(c->name) == len && !strncmp(c->name, name, len))
            return c;
    return NULL;
}

static const char *choice_of_value(const struct k3_opt_choice *c, uint64_t value)
{
    for (; c && c->name; c++)
        if (c->value == value)
            return c->name;
    return NULL;
}

/* The names joined: "a|b|c" (sep "|", no last) or "a, b or c" (sep ", ", last " or "). */
static void join_choices(const struct k3_opt_choice *c, const char *sep, const char *last,
                         char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; c[i].name && at < len; i++) {
        const char *s = !i ? "" : last && !c[i + 1].name ? last : sep;
        at += (size_t)snprintf(buf + at, len - at, "%s%s", s, c[i].name);
    }
}

/* The value's placeholder: the table's, else from the choices ("a|b", a SET's "a,b",
 * "SIZE|a|b"), else "VALUE". */
static void placeholder(const struct k3_opt *o, char *buf, size_t len)
{
    char names[128];
    if (o->arg) {
        snprintf(buf, len, "%s", o->arg);
    } else if (o->choices) {
        join_choices(o->choices, o->type == K3_OPT_SET ? "," : "|", NULL, names, sizeof names);
        snprintf(buf, len, "%s%s", o->type == K3_OPT_SIZE ? "SIZE|" : "", names);
    } else {
        snprintf(buf, len, "VALUE");
    }
}

/* ---- parsing one value ----------------------------------------------------------------- */

static bool has_range(const struct k3_opt *o)
{
    return o->min != 0 || o->max != 0;
}

static int parse_int(const struct k3_opt *o, const char *flag, const char *val, int *out,
                     struct k3_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (end == val || *end || errno || v < INT_MIN || v > INT_MAX)
        return k3_errf(err, "%s: \"%s\" is not an integer", flag, val);
    if (has_range(o) && (v < o->min || v > o->max))
        return k3_errf(err, "%s: %ld is outside [%.0f, %.0f]", flag, v, o->min, o->max);
    *out = (int)v;
    return 0;
}

static int parse_ints(const struct k3_opt *o, const char *flag, const char *val,
                      struct k3_err *err)
{
    struct k3_opt_ints list = {0};
    const char *p = val;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || v < INT_MIN || v > INT_MAX)
            return k3_errf(err, "%s: \"%s\" is not a comma-separated list of integers", flag, val);
        if (has_range(o) && (v < o->min || v > o->max))
            return k3_errf(err, "%s: %ld is outside [%.0f, %.0f]", flag, v, o->min, o->max);
        if (list.n == K3_OPT_INTS_MAX)
            return k3_errf(err, "%s: \"%s\" has more than %d values", flag, val, K3_OPT_INTS_MAX);
        list.v[list.n++] = (int)v;
        if (!*end)
            break;
        p = end + 1;
    }
    *(struct k3_opt_ints *)o->dst = list;
    return 0;
}

static int not_a_choice(const struct k3_opt *o, const char *flag, const char *val, size_t len,
                        struct k3_err *err)
{
    char names[256];
    join_choices(o->choices, ", ", " or ", names, sizeof names);
    return k3_errf(err, "%s: \"%.*s\" is not %s", flag, (int)len, val, names);
}

static int parse_set(const struct k3_opt *o, const char *flag, const char *val,
                     struct k3_err *err)
{
    unsigned bits = 0;
    for (const char *p = val;;) {
        size_t len = strcspn(p, ",");
        const struct k3_opt_choice *c = choice_named(o->choices, p, len);
        if (!c)
            return not_a_choice(o, flag, p, len, err);
        bits |= (unsigned)c->value;
        if (!p[len])
            break;
        p += len + 1;
    }
    *(unsigned *)o->dst = bits;
    return 0;
}

static int parse_size(const struct k3_opt *o, const char *flag, const char *val,
                      struct k3_err *err)
{
    const struct k3_opt_choice *c = choice_named(o->choices, val, strlen(val));
    uint64_t bytes;
    if (c) {
        bytes = c->value;
    } else if (k3_parse_size(val, &bytes)) {
        char names[256] = "";
        if (o->choices) {
            names[0] = ',', names[1] = ' ';
            join_choices(o->choices, ", ", " or ", names + 2, sizeof names - 2);
        }
        return k3_errf(err, "%s: \"%s\" is not a size (e.g. 512M, 8G)%s", flag, val, names);
    } else if (bytes < o->min) {
        char least[32];
        if (o->min < 1024)
            snprintf(least, sizeof least, "%.0f byte%s", o->min, o->min == 1 ? "" : "s");
        else
            format_size((uint64_t)o->min, least, sizeof least);
        return k3_errf(err, "%s: \"%s\" is below %s", flag, val, least);
    }
    *(uint64_t *)o->dst = bytes;
    return 0;
}

static int set_value(const struct k3_opt *o, const char *flag, const char *val, struct k3_err *err)
{
    char *end;
    switch (o->type) {
    case K3_OPT_STRING:
        *(const char **)o->dst = val;
        return 0;
    case K3_OPT_INT:
        return parse_int(o, flag, val, o->dst, err);
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
        if (has_range(o) && (v < o->min || v > o->max))
            return k3_errf(err, "%s: %g is outside [%g, %g]", flag, v, o->min, o->max);
        *(float *)o->dst = (float)v;
        return 0;
    }
    case K3_OPT_FLAG:
        *(bool *)o->dst = true;
        return 0;
    case K3_OPT_SIZE:
        return parse_size(o, flag, val, err);
    case K3_OPT_ENUM: {
        const struct k3_opt_choice *c = choice_named(o->choices, val, strlen(val));
        if (!c)
            return not_a_choice(o, flag, val, strlen(val), err);
        *(int *)o->dst = (int)c->value;
        return 0;
    }
    case K3_OPT_SET:
        return parse_set(o, flag, val, err);
    case K3_OPT_INTS:
        return parse_ints(o, flag, val, err);
    case K3_OPT_CUSTOM:
        return o->parse(o, flag, val, err);
    }
    return k3_errf(err, "%s: bad option table", flag);
}

/* ---- parsing argv ---------------------------------------------------------------------- */

/* The entry argument a names ("--name", "--name=value" or "-x"), NULL when none does;
 * *inline_val: the value after '=', if any. */
static const struct k3_opt *find_flag(const struct k3_opt *opts, int n_opts, const char *a,
                                      const char **inline_val)
{
    *inline_val = NULL;
    if (a[0] == '-' && a[1] == '-') {
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        *inline_val = eq ? eq + 1 : NULL;
        for (int k = 0; k < n_opts; k++)
            if (!opts[k].positional && strlen(opts[k].name) == len &&
                !strncmp(opts[k].name, name, len))
                return &opts[k];
    } else if (a[0] == '-' && a[1] && !a[2]) {
        for (int k = 0; k < n_opts; k++)
            if (opts[k].short_name == a[1])
                return &opts[k];
    }
    return NULL;
}

/* The entry that takes the n-th bare argument, NULL when none does. */
static const struct k3_opt *find_positional(const struct k3_opt *opts, int n_opts, int n)
{
    for (int k = 0; k < n_opts; k++)
        if (opts[k].positional && n-- == 0)
            return &opts[k];
    return NULL;
}

int k3_opts_parse(const struct k3_opt *opts, int n_opts, int argc, char **argv,
                  struct k3_err *err)
{
    int n_bare = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *inline_val;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (a[0] != '-' || !a[1]) {
            const struct k3_opt *p = find_positional(opts, n_opts, n_bare++);
            if (!p)
                return k3_errf(err, "%s: unknown argument (see --help)", a);
            *(const char **)p->dst = a;
            continue;
        }
        const struct k3_opt *o = find_flag(opts, n_opts, a, &inline_val);
        if (!o)
            return k3_errf(err, "%s: unknown option (see --help)", a);
        if (o->type == K3_OPT_FLAG) {
            if (inline_val)
                return k3_errf(err, "%s: takes no value", a);
            set_value(o, a, NULL, err);
            continue;
        }
        const char *val = inline_val;
        if (!val && i + 1 >= argc) {
            char arg[160];
            placeholder(o, arg, sizeof arg);
            return k3_errf(err, "%s: needs a value (%s)", a, arg);
        }
        if (!val)
            val = argv[++i];
        if (set_value(o, a, val, err))
            return -1;
    }
    return 0;
}

int k3_opts_parse_env(const struct k3_opt *vars, int n_vars, struct k3_err *err)
{
    for (int k = 0; k < n_vars; k++) {
        const struct k3_opt *o = &vars[k];
        const char *val = getenv(o->name);
        if (!val)
            continue;
        if (!*val)
            return k3_errf(err, "%s: an empty value (unset it for the default)", o->name);
        if (set_value(o, o->name, val, err))
            return -1;
    }
    return 0;
}

/* ---- help and listing ------------------------------------------------------------------ */

/* The destination's value as text ("" when it has none: a NULL string). */
static void value_text(const struct k3_opt *o, char *buf, size_t len)
{
    buf[0] = 0;
    switch (o->type) {
    case K3_OPT_STRING:
        snprintf(buf, len, "%s", *(const char **)o->dst ? *(const char **)o->dst : "");
        break;
    case K3_OPT_INT:
        snprintf(buf, len, "%d", *(int *)o->dst);
        break;
    case K3_OPT_U64:
        snprintf(buf, len, "%llu", (unsigned long long)*(uint64_t *)o->dst);
        break;
    case K3_OPT_FLOAT:
        snprintf(buf, len, "%g", *(float *)o->dst);
        break;
    case K3_OPT_FLAG:
        snprintf(buf, len, "%s", *(bool *)o->dst ? "yes" : "no");
        break;
    case K3_OPT_SIZE: {
        const char *name = choice_of_value(o->choices, *(uint64_t *)o->dst);
        if (name)
            snprintf(buf, len, "%s", name);
        else
            format_size(*(uint64_t *)o->dst, buf, len);
        break;
    }
    case K3_OPT_ENUM: {
        const char *name = choice_of_value(o->choices, (uint64_t)*(int *)o->dst);
        snprintf(buf, len, "%s", name ? name : "?");
        break;
    }
    case K3_OPT_SET: {
        unsigned bits = *(unsigned *)o->dst, named = 0;
        size_t at = 0;
        for (const struct k3_opt_choice *c = o->choices; c->name && at < len; c++)
            if (c->value && (c->value & bits) == c->value && !(c->value & named)) {
                at += (size_t)snprintf(buf + at, len - at, "%s%s", named ? "," : "", c->name);
                named |= (unsigned)c->value;
            }
        break;
    }
    case K3_OPT_INTS: {
        const struct k3_opt_ints *l = o->dst;
        size_t at = 0;
        for (int i = 0; i < l->n && at < len; i++)
            at += (size_t)snprintf(buf + at, len - at, i ? ",%d" : "%d", l->v[i]);
        break;
    }
    case K3_OPT_CUSTOM: /* its value has no text of its own: .def says the default */
        break;
    }
}

/* " (default X)" from .def or the destination's value; "" for flags and unset strings. */
static void default_text(const struct k3_opt *o, char *buf, size_t len)
{
    char value[128];
    buf[0] = 0;
    if (o->def)
        snprintf(buf, len, " (default %s)", o->def);
    else if (o->type != K3_OPT_FLAG && (value_text(o, value, sizeof value), value[0]))
        snprintf(buf, len, " (default %s)", value);
}

/* "-x, --name ARG", "    --name ARG" (no ARG for a flag) or a positional's name. */
static void flag_text(const struct k3_opt *o, char *buf, size_t len)
{
    char arg[160] = "";
    if (o->type != K3_OPT_FLAG)
        placeholder(o, arg, sizeof arg);
    if (o->positional)
        snprintf(buf, len, "%s", o->name);
    else if (o->short_name)
        snprintf(buf, len, "-%c, --%s%s%s", o->short_name, o->name, arg[0] ? " " : "", arg);
    else
        snprintf(buf, len, "    --%s%s%s", o->name, arg[0] ? " " : "", arg);
}

void k3_opts_help(FILE *f, const char *usage, const struct k3_opt *opts, int n_opts)
{
    fprintf(f, "%s\n\noptions:\n", usage);
    for (int k = 0; k < n_opts; k++) {
        char flag[192], def[160];
        flag_text(&opts[k], flag, sizeof flag);
        default_text(&opts[k], def, sizeof def);
        fprintf(f, "  %-28s %s%s\n", flag, opts[k].help, def);
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}

void k3_opts_help_env(FILE *f, const struct k3_opt *vars, int n_vars)
{
    fprintf(f, "\nenvironment:\n");
    for (int k = 0; k < n_vars; k++) {
        char arg[160], name[192], def[160];
        placeholder(&vars[k], arg, sizeof arg);
        snprintf(name, sizeof name, "%s=%s", vars[k].name, arg);
        default_text(&vars[k], def, sizeof def);
        if (strlen(name) > 28) /* its help on the next line, where the others' start */
            fprintf(f, "  %s\n  %-28s %s%s\n", name, "", vars[k].help, def);
        else
            fprintf(f, "  %-28s %s%s\n", name, vars[k].help, def);
    }
}

void k3_opts_print_values(FILE *f, const struct k3_opt *opts, int n_opts)
{
    int width = 12;
    for (int k = 0; k < n_opts; k++)
        if ((int)strlen(opts[k].name) + 3 > width)
            width = (int)strlen(opts[k].name) + 3;
    for (int k = 0; k < n_opts; k++) {
        char flag[128], value[256];
        snprintf(flag, sizeof flag, "%s%s", opts[k].positional ? "" : "--", opts[k].name);
        value_text(&opts[k], value, sizeof value);
        fprintf(f, "  %-*s %s\n", width, flag, value);
    }
}
