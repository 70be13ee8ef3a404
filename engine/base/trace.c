#include "engine/base/trace.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"

#define TID_COMPUTE 1
#define TID_TEAM0 10
#define MAX_TEAM_TRACKS 64
#define TID_DRIVE0 100
#define TID_STORAGE0 400 /* after TID_DRIVE0's 256 drives */
#define MAX_STORAGE_TRACKS 256

struct k3_trace {
    FILE *f;
    int pid;               /* 1, or rank + 1 under mpirun */
    bool part;             /* a follower's events, without the file's header and end */
    bool read_back;        /* a part being read: nothing more is written */
    double t0;
    uint64_t next_id;
    int depth;
    uint64_t named_teams;  /* bit i: team i's track has its name */
    uint64_t named_storage[MAX_STORAGE_TRACKS / 64]; /* bit d: drive d's storage track's */
    int write_error;
};

static double mono_us(void) { return k3_now() * 1e6; }

double k3_trace_now(const struct k3_trace *t) { return t ? mono_us() - t->t0 : 0; }

/* Room for a name as a JSON string: longer names are cut. */
#define QUOTED_MAX 256

/* s as a JSON string, its quotes included, in out[QUOTED_MAX]: '"' and '\\' escaped,
 * control characters as \u00XX.  A name too long is cut, never inside an escape or a
 * UTF-8 character. */
static const char *quoted(char *out, const char *s)
{
    size_t n = 0;
    out[n++] = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8] = {(char)c};
        int len = 1;
        if (c == '"' || c == '\\')
            len = snprintf(esc, sizeof esc, "\\%c", c);
        else if (c < 0x20)
            len = snprintf(esc, sizeof esc, "\\u%04x", c);
        if (n + (size_t)len + 2 > QUOTED_MAX) {
            if ((c & 0xc0) == 0x80) { /* inside a character: drop what is written of it */
                while (n > 1 && ((unsigned char)out[n - 1] & 0xc0) == 0x80)
                    n--;
                if (n > 1 && (unsigned char)out[n - 1] >= 0xc0)
                    n--;
            }
            break;
        }
        memcpy(out + n, esc, (size_t)len);
        n += (size_t)len;
    }
    out[n++] = '"';
    out[n] = 0;
    return out;
}

static void emit(struct k3_trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(struct k3_trace *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(",\n", t->f);
    if (vfprintf(t->f, fmt, ap) < 0)
        t->write_error = errno ? errno : EIO;
    va_end(ap);
}

static void thread_name(struct k3_trace *t, int tid, const char *name, int sort)
{
    char q[QUOTED_MAX];
    emit(t, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":%s}}",
         t->pid, tid, quoted(q, name));
    emit(t, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
         t->pid, tid, sort);
}

int k3_trace_open(struct k3_trace **out, const char *path, int n_drives, int rank,
                  struct k3_err *err)
{
    struct k3_trace *t = calloc(1, sizeof *t);
    if (!t)
        return k3_errf(err, "out of memory");
    t->part = !path;
    t->pid = rank < 0 ? 1 : rank + 1;
    t->f = path ? fopen(path, "w") : tmpfile();
    if (!t->f) {
        free(t);
        return k3_errf(err, "--trace %s: %s", path ? path : "(a temporary file)", strerror(errno));
    }
    t->t0 = mono_us();
    char process[32] = "k3-uring";
    if (rank >= 0)
        snprintf(process, sizeof process, "k3-uring rank %d", rank);
    /* Every event but a whole file's first starts with ",\n", so a part appends anywhere. */
    if (!t->part)
        fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", t->f);
    char q[QUOTED_MAX];
    fprintf(t->f, "%s{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":%s}}",
            t->part ? ",\n" : "", t->pid, quoted(q, process));
    thread_name(t, TID_COMPUTE, "compute", 0);
    for (int d = 0; d < n_drives; d++) {
        char name[32];
        snprintf(name, sizeof name, "drive %d reads", d);
        thread_name(t, TID_DRIVE0 + d, name, 1 + MAX_TEAM_TRACKS + d);
    }
    *out = t;
    return 0;
}

size_t k3_trace_part_read(struct k3_trace *t, char *buf, size_t cap)
{
    assert(t->part);
    if (!t->read_back) {
        while (t->depth > 0)
            k3_trace_end(t);
        fflush(t->f);
        rewind(t->f);
        t->read_back = true;
    }
    size_t n = fread(buf, 1, cap, t->f);
    if (n < cap && ferror(t->f))
        t->write_error = errno ? errno : EIO;
    return n;
}

void k3_trace_append(struct k3_trace *t, const char *text, size_t n)
{
    if (t && fwrite(text, 1, n, t->f) != n)
        t->write_error = errno ? errno : EIO;
}

int k3_trace_close(struct k3_trace *t, struct k3_err *err)
{
    if (!t)
        return 0;
    while (t->depth > 0)
        k3_trace_end(t);
    if (!t->part)
        fputs("\n]}\n", t->f);
    int e = t->write_error;
    if (fclose(t->f) && !e)
        e = errno;
    free(t);
    return e ? k3_errf(err, "--trace: write failed: %s", strerror(e)) : 0;
}

void k3_trace_begin(struct k3_trace *t, const char *name, const char *args)
{
    if (!t)
        return;
    t->depth++;
    char q[QUOTED_MAX];
    emit(t, "{\"ph\":\"B\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"name\":%s,\"args\":{%s}}", t->pid,
         TID_COMPUTE, k3_trace_now(t), quoted(q, name), args ? args : "");
}

void k3_trace_end(struct k3_trace *t)
{
    if (!t || t->depth == 0)
        return;
    t->depth--;
    emit(t, "{\"ph\":\"E\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f}", t->pid, TID_COMPUTE, k3_trace_now(t));
}

void k3_trace_team_span(struct k3_trace *t, int team, int node, const char *name,
                        const char *args, double begin, double end)
{
    if (!t)
        return;
    int track = team < MAX_TEAM_TRACKS ? team : MAX_TEAM_TRACKS - 1;
    if (!(t->named_teams >> track & 1)) {
        char label[48];
        if (node >= 0)
            snprintf(label, sizeof label, "team %d (node %d)", track, node);
        else
            snprintf(label, sizeof label, "team %d", track);
        thread_name(t, TID_TEAM0 + track, label, 1 + track);
        t->named_teams |= 1ull << track;
    }
    char q[QUOTED_MAX];
    emit(t, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,\"name\":%s,"
            "\"args\":{%s}}",
         t->pid, TID_TEAM0 + track, begin, end - begin, quoted(q, name), args ? args : "");
}

void k3_trace_read(struct k3_trace *t, int drive, double submitted, double landed, uint32_t bytes,
                   const char *what)
{
    if (!t)
        return;
    uint64_t id = ++t->next_id;
    char q[QUOTED_MAX];
    quoted(q, what);
    emit(t, "{\"ph\":\"b\",\"cat\":\"read\",\"id\":%llu,\"pid\":%d,\"tid\":%d,\"ts\":%.1f,"
            "\"name\":%s,\"args\":{\"bytes\":%u}}",
         (unsigned long long)id, t->pid, TID_DRIVE0 + drive, submitted, q, bytes);
    emit(t, "{\"ph\":\"e\",\"cat\":\"read\",\"id\":%llu,\"pid\":%d,\"tid\":%d,\"ts\":%.1f,"
            "\"name\":%s}",
         (unsigned long long)id, t->pid, TID_DRIVE0 + drive, landed, q);
}

void k3_trace_storage_read(struct k3_trace *t, int drive, double begin_s, double end_s,
                           uint32_t bytes, const char *what)
{
    if (!t)
        return;
    int track = drive % MAX_STORAGE_TRACKS;
    if (!(t->named_storage[track / 64] >> (track % 64) & 1)) {
        char name[48];
        snprintf(name, sizeof name, "drive %d storage", track);
        thread_name(t, TID_STORAGE0 + track, name, 1 + MAX_TEAM_TRACKS + MAX_STORAGE_TRACKS + track);
        t->named_storage[track / 64] |= 1ull << (track % 64);
    }
    uint64_t id = ++t->next_id;
    char q[QUOTED_MAX];
    quoted(q, what);
    emit(t, "{\"ph\":\"b\",\"cat\":\"storage\",\"id\":%llu,\"pid\":%d,\"tid\":%d,\"ts\":%.1f,"
            "\"name\":%s,\"args\":{\"bytes\":%u}}",
         (unsigned long long)id, t->pid, TID_STORAGE0 + track, begin_s * 1e6 - t->t0, q, bytes);
    emit(t, "{\"ph\":\"e\",\"cat\":\"storage\",\"id\":%llu,\"pid\":%d,\"tid\":%d,\"ts\":%.1f,"
            "\"name\":%s}",
         (unsigned long long)id, t->pid, TID_STORAGE0 + track, end_s * 1e6 - t->t0, q);
}

void k3_trace_counter(struct k3_trace *t, const char *name, double value)
{
    if (!t)
        return;
    char q[QUOTED_MAX];
    emit(t, "{\"ph\":\"C\",\"pid\":%d,\"ts\":%.1f,\"name\":%s,\"args\":{\"value\":%.0f}}", t->pid,
         k3_trace_now(t), quoted(q, name), value);
}
