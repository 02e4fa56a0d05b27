/* Reading a recording: the summary by op, the totals and memory figures,
 * and the Chrome trace JSON. */
#include "record.h"
#include "../core/save.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Under the control lock: 0 if there is a finished recording to read. */
static int check_readable(const char *fn) {
    const oari_prof_session *s = oari_prof_session_get();
    if (s->recording)
        return oari_error(OAR_ERR_STATE, "%s: the profiler is recording; call oar_profiler_stop "
                          "first", fn);
    if (!s->have_data)
        return oari_error(OAR_ERR_STATE, "%s: nothing recorded; call oar_profiler_start and "
                          "oar_profiler_stop first", fn);
    return 0;
}

/* ---- aggregation -------------------------------------------------------- */

/* Self times: a thread's spans arrive in the order they ended, so the
 * spans still on `open` that began after a span began are its direct
 * children. */
typedef struct open_span {
    int64_t t0, dur;
} open_span;

typedef struct agg {
    oar_profiler_stat *rows;
    int n, cap, last, st;
    int64_t n_events;
    open_span *open; /* the current thread's spans not yet claimed by a parent */
    size_t n_open, cap_open;
} agg;

/* The span's own time, less that of its children; pushes it. */
static int64_t self_time(agg *a, const oari_prof_span_ev *e) {
    int64_t self = e->dur;
    while (a->n_open && a->open[a->n_open - 1].t0 >= e->t0) self -= a->open[--a->n_open].dur;
    if (a->n_open == a->cap_open) {
        size_t cap = a->cap_open ? 2 * a->cap_open : 256;
        open_span *p = oari_realloc(a->open, a->cap_open * sizeof *p, cap * sizeof *p);
        if (!p) {
            a->st = OAR_ERR_NOMEM;
            return 0;
        }
        a->open = p;
        a->cap_open = cap;
    }
    a->open[a->n_open++] = (open_span){e->t0, e->dur};
    return self < 0 ? 0 : self;
}

static void agg_span(void *ctx, const oari_prof_thread *th, const oari_prof_span_ev *e) {
    (void)th;
    agg *a = ctx;
    a->n_events++;
    if (a->st) return;
    int r = a->last;
    if (r >= a->n || a->rows[r].kind != e->kind || a->rows[r].name != e->name) {
        for (r = 0; r < a->n; r++)
            if (a->rows[r].kind == e->kind &&
                (a->rows[r].name == e->name || !strcmp(a->rows[r].name, e->name)))
                break;
    }
    if (r == a->n) {
        if (a->n == a->cap) {
            int cap = a->cap ? 2 * a->cap : 64;
            oar_profiler_stat *p = oari_realloc(a->rows, (size_t)a->cap * sizeof *p,
                                                (size_t)cap * sizeof *p);
            if (!p) {
                a->st = OAR_ERR_NOMEM;
                return;
            }
            a->rows = p;
            a->cap = cap;
        }
        a->rows[r] = (oar_profiler_stat){.name = e->name, .kind = (oar_profiler_kind)e->kind,
                                         .min_ns = INT64_MAX};
        a->n++;
    }
    int64_t self = self_time(a, e);
    if (a->st) return;
    oar_profiler_stat *s = &a->rows[r];
    s->calls++;
    s->self_ns += self;
    s->total_ns += e->dur;
    if (e->dur < s->min_ns) s->min_ns = e->dur;
    if (e->dur > s->max_ns) s->max_ns = e->dur;
    a->last = r;
}

static int by_total(const void *pa, const void *pb) {
    const oar_profiler_stat *a = pa, *b = pb;
    if (a->total_ns != b->total_ns) return a->total_ns < b->total_ns ? 1 : -1;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Under the control lock, the recording readable. a->rows is owned by the
 * caller (free with agg_free). */
static int aggregate(agg *a) {
    for (oari_prof_thread *th = oari_prof_threads(); th; th = th->next) {
        a->n_open = 0;
        oari_prof_each_span(th, agg_span, a);
    }
    oari_free(a->open, a->cap_open * sizeof *a->open);
    a->open = NULL;
    a->cap_open = 0;
    if (a->st) return a->st;
    const oari_prof_session *s = oari_prof_session_get();
    double wall = (double)(s->t_stop - s->t_start);
    for (int r = 0; r < a->n; r++) {
        a->rows[r].share = wall > 0 ? a->rows[r].total_ns / wall : 0;
        a->rows[r].self_share = wall > 0 ? a->rows[r].self_ns / wall : 0;
    }
    if (a->n) qsort(a->rows, (size_t)a->n, sizeof *a->rows, by_total);
    return 0;
}

static void agg_free(agg *a) { oari_free(a->rows, (size_t)a->cap * sizeof *a->rows); }

typedef struct mem_acc {
    oar_profiler_totals *t;
    bool seen;
} mem_acc;

static void mem_counter(void *ctx, const oari_prof_thread *th, const oari_prof_counter_ev *e) {
    (void)th;
    mem_acc *m = ctx;
    m->seen = true;
    if ((size_t)e->bytes > m->t->peak_bytes) m->t->peak_bytes = (size_t)e->bytes;
    if (e->delta > 0) m->t->n_allocs++;
    else m->t->n_frees++;
}

static void count_span(void *ctx, const oari_prof_thread *th, const oari_prof_span_ev *e) {
    (void)th;
    (void)e;
    *(bool *)ctx = true;
}

static void count_events(void *ctx, const oari_prof_thread *th, const oari_prof_span_ev *e) {
    (void)th;
    (void)e;
    ++*(int64_t *)ctx;
}

/* Under the control lock, the recording readable. */
static void totals(oar_profiler_totals *t, int64_t n_events) {
    const oari_prof_session *s = oari_prof_session_get();
    memset(t, 0, sizeof *t);
    t->wall_ns = s->t_stop - s->t_start;
    t->n_events = n_events;
    t->n_dropped = oari_prof_dropped();
    t->start_bytes = s->start_bytes;
    t->end_bytes = s->end_bytes;
    t->peak_bytes = s->start_bytes > s->end_bytes ? s->start_bytes : s->end_bytes;
    for (oari_prof_thread *th = oari_prof_threads(); th; th = th->next) {
        mem_acc m = {.t = t};
        bool spans = false;
        oari_prof_each_counter(th, mem_counter, &m);
        oari_prof_each_span(th, count_span, &spans);
        if (m.seen || spans) t->n_threads++;
    }
}

int oar_profiler_stats(oar_profiler_stat *out, int cap) {
    if (cap < 0 || (cap > 0 && !out))
        return oari_error(OAR_ERR_INVALID, "oar_profiler_stats: bad output array (cap %d%s)", cap,
                          out ? "" : ", out NULL");
    oari_prof_lock();
    agg a = {0};
    int st = check_readable("oar_profiler_stats");
    if (!st) st = aggregate(&a);
    if (!st) {
        for (int r = 0; r < a.n && r < cap; r++) out[r] = a.rows[r];
        st = a.n;
    }
    agg_free(&a);
    oari_prof_unlock();
    return st;
}

int oar_profiler_totals_get(oar_profiler_totals *out) {
    if (!out) return oari_error(OAR_ERR_INVALID, "oar_profiler_totals_get: out is NULL");
    oari_prof_lock();
    int st = check_readable("oar_profiler_totals_get");
    if (!st) {
        int64_t n = 0;
        for (oari_prof_thread *th = oari_prof_threads(); th; th = th->next)
            oari_prof_each_span(th, count_events, &n);
        totals(out, n);
    }
    oari_prof_unlock();
    return st;
}

/* ---- the summary -------------------------------------------------------- */

/* Text to a FILE or, snprintf-like, to a buffer. */
typedef struct sink {
    FILE *f;
    char *buf;
    size_t size, len;
    bool failed;
} sink;

static void OARI_PRINTF(2, 3) put(sink *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (s->f) {
        if (vfprintf(s->f, fmt, ap) < 0) s->failed = true;
    } else {
        size_t room = s->len < s->size ? s->size - s->len : 0;
        int n = vsnprintf(room ? s->buf + s->len : NULL, room, fmt, ap);
        if (n > 0) s->len += (size_t)n;
    }
    va_end(ap);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static int summary(sink *s, const char *fn) {
    oari_prof_lock();
    agg a = {0};
    int st = check_readable(fn);
    if (!st) st = aggregate(&a);
    if (st) {
        agg_free(&a);
        oari_prof_unlock();
        return st;
    }
    oar_profiler_totals t;
    totals(&t, a.n_events);
    put(s, "oar profile: %.3f ms recorded on %d thread%s, %lld events", t.wall_ns * 1e-6,
        t.n_threads, t.n_threads == 1 ? "" : "s", (long long)t.n_events);
    if (t.n_dropped) put(s, " (%lld dropped: out of memory)", (long long)t.n_dropped);
    put(s, "\n%-9s %-26s %9s %11s %11s %11s %11s %7s %11s %7s\n", "kind", "name", "calls",
        "total ms", "avg us", "min us", "max us", "share", "self ms", "self");
    for (int r = 0; r < a.n; r++) {
        const oar_profiler_stat *x = &a.rows[r];
        put(s, "%-9s %-26s %9lld %11.3f %11.2f %11.2f %11.2f %6.1f%% %11.3f %6.1f%%\n",
            oari_prof_kind_name(x->kind), x->name, (long long)x->calls, x->total_ns * 1e-6,
            x->total_ns * 1e-3 / (double)x->calls, x->min_ns * 1e-3, x->max_ns * 1e-3,
            100.0 * x->share, x->self_ns * 1e-6, 100.0 * x->self_share);
    }
    put(s, "memory: peak %.2f MiB (%zu bytes) of tensor storage in use, %lld allocations, "
        "%lld frees; %.2f MiB at start, %.2f MiB at stop\n", mib(t.peak_bytes), t.peak_bytes,
        (long long)t.n_allocs, (long long)t.n_frees, mib(t.start_bytes), mib(t.end_bytes));
    agg_free(&a);
    oari_prof_unlock();
    return 0;
}

int oar_profiler_summary(char *buf, size_t size) {
    if (!buf && size)
        return oari_error(OAR_ERR_INVALID, "oar_profiler_summary: buf is NULL but size is %zu",
                          size);
    sink s = {.buf = buf, .size = size};
    if (size) buf[0] = 0;
    int st = summary(&s, "oar_profiler_summary");
    if (st) return st;
    if (s.len > (size_t)INT32_MAX)
        return oari_error(OAR_ERR_INVALID, "oar_profiler_summary: the text is too long (%zu "
                          "bytes); use oar_profiler_summary_write", s.len);
    return (int)s.len;
}

int oar_profiler_summary_write(FILE *f) {
    if (!f) return oari_error(OAR_ERR_INVALID, "oar_profiler_summary_write: f is NULL");
    sink s = {.f = f};
    int st = summary(&s, "oar_profiler_summary_write");
    if (!st && s.failed)
        st = oari_error(OAR_ERR_IO, "oar_profiler_summary_write: writing failed: %s",
                        strerror(errno));
    return st;
}

/* ---- the Chrome trace --------------------------------------------------- */

typedef struct trace_ctx {
    FILE *f;
    long pid;
    int64_t t_start;
} trace_ctx;

/* s as a JSON string body (without quotes). */
static void json_escaped(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
}

static void trace_span(void *ctx, const oari_prof_thread *th, const oari_prof_span_ev *e) {
    trace_ctx *c = ctx;
    FILE *f = c->f;
    fputs(",\n{\"name\":\"", f);
    json_escaped(f, e->name);
    if (e->kind == OAR_PROFILER_BACKWARD) fputs("_backward", f);
    fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%ld,\"tid\":%ld",
            oari_prof_kind_name(e->kind), (e->t0 - c->t_start) * 1e-3, e->dur * 1e-3, c->pid,
            th->os_tid);
    if (e->kind == OAR_PROFILER_OP && e->n_in) {
        fputs(",\"args\":{\"inputs\":[", f);
        int used = 0, kept = e->n_in < OARI_PROF_SHAPES ? e->n_in : OARI_PROF_SHAPES;
        for (int i = 0; i < kept; i++) {
            if (i) fputc(',', f);
            if (e->ndim[i] < 0) {
                fputs("null", f);
                continue;
            }
            fputc('[', f);
            for (int d = 0; d < e->ndim[i]; d++)
                fprintf(f, d ? ",%lld" : "%lld", (long long)e->dims[used + d]);
            fputc(']', f);
            used += e->ndim[i];
        }
        fputc(']', f);
        if (e->n_in > kept) fprintf(f, ",\"n_inputs\":%d", e->n_in);
        fputc('}', f);
    }
    fputc('}', f);
}

static void trace_counter(void *ctx, const oari_prof_thread *th, const oari_prof_counter_ev *e) {
    trace_ctx *c = ctx;
    fprintf(c->f, ",\n{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%ld,\"tid\":%ld,"
            "\"args\":{\"bytes_in_use\":%lld}}", (e->t - c->t_start) * 1e-3, c->pid, th->os_tid,
            (long long)e->bytes);
}

static void trace_body(FILE *f) {
    const oari_prof_session *s = oari_prof_session_get();
    trace_ctx c = {.f = f, .pid = (long)getpid(), .t_start = s->t_start};
    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":0,"
            "\"args\":{\"name\":\"oar\"}}", c.pid);
    fprintf(f, ",\n{\"name\":\"memory\",\"ph\":\"C\",\"ts\":0.000,\"pid\":%ld,\"tid\":0,"
            "\"args\":{\"bytes_in_use\":%zu}}", c.pid, s->start_bytes);
    for (oari_prof_thread *th = oari_prof_threads(); th; th = th->next) {
        bool any = false;
        oari_prof_each_span(th, count_span, &any);
        if (!any) continue;
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":%ld,"
                "\"args\":{\"name\":\"", c.pid, th->os_tid);
        json_escaped(f, th->name);
        fputs("\"}}", f);
    }
    for (oari_prof_thread *th = oari_prof_threads(); th; th = th->next) {
        oari_prof_each_span(th, trace_span, &c);
        oari_prof_each_counter(th, trace_counter, &c);
    }
    fprintf(f, ",\n{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%ld,\"tid\":0,"
            "\"args\":{\"bytes_in_use\":%zu}}", (s->t_stop - s->t_start) * 1e-3, c.pid,
            s->end_bytes);
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"oar\","
            "\"dropped_events\":%lld}}\n", (long long)oari_prof_dropped());
}

int oar_profiler_write_trace(const char *path) {
    if (!path || !*path)
        return oari_error(OAR_ERR_INVALID, "oar_profiler_write_trace: the path is %s",
                          path ? "empty" : "NULL");
    oari_prof_lock();
    int st = check_readable("oar_profiler_write_trace");
    /* the trace is formatted in memory, then saved as every file oar writes
     * is (core/save.h): a crash mid-write leaves the old file or the new */
    char *text = NULL;
    size_t len = 0;
    FILE *f = st ? NULL : open_memstream(&text, &len);
    if (!st && !f) st = oari_error(OAR_ERR_NOMEM, "oar_profiler_write_trace: out of memory");
    if (f) {
        trace_body(f);
        bool bad = ferror(f) != 0;
        if (fclose(f) || bad)
            st = oari_error(OAR_ERR_NOMEM, "oar_profiler_write_trace: formatting the trace failed");
        else
            st = oari_file_save(path, text, len, "oar_profiler_write_trace");
    }
    free(text); /* open_memstream's buffer: the C library's malloc */
    oari_prof_unlock();
    return st;
}
