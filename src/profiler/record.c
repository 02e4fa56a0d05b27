/* Recording: the on/off flag, per-thread event buffers, the session
 * (start, stop, reset) and OAR_PROFILE (start at load, write at exit). */
#define _GNU_SOURCE
#include "record.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPANS_PER_CHUNK 512
#define COUNTERS_PER_CHUNK 2048

int oari_prof_on;

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;  /* the public functions */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER; /* `threads`; held briefly */
/* Lock order: ctl_lock, then the allocator's lock, then list_lock. */

static oari_prof_session session;
static oari_prof_thread *threads;  /* every thread that recorded; guarded by list_lock */
static unsigned cur_gen;           /* session.gen, for the writers (atomic) */
static unsigned epoch = 1;         /* bumped by reset: thread-local buffers are stale */
static int64_t n_dropped;          /* atomic */

static _Thread_local oari_prof_thread *tls_thread;
static _Thread_local unsigned tls_epoch;

void oari_prof_lock(void) { pthread_mutex_lock(&ctl_lock); }
void oari_prof_unlock(void) { pthread_mutex_unlock(&ctl_lock); }
const oari_prof_session *oari_prof_session_get(void) { return &session; }

oari_prof_thread *oari_prof_threads(void) {
    pthread_mutex_lock(&list_lock);
    oari_prof_thread *t = threads;
    pthread_mutex_unlock(&list_lock);
    return t;
}

const char *oari_prof_kind_name(int kind) {
    static const char *const names[OAR_PROFILER_KIND_COUNT] = {"op", "backward", "optim", "data"};
    return kind >= 0 && kind < OAR_PROFILER_KIND_COUNT ? names[kind] : "?";
}

int64_t oari_prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    return t ? t : 1;
}

/* ---- writing (the calling thread's own buffer, no lock) ------------------ */

/* An allocation that leaves the caller's error message as it was: a
 * recording that cannot grow drops events, it does not fail the op. */
static void *quiet_alloc(size_t n) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", oar_last_error());
    void *p = oari_malloc(n);
    if (!p) {
        oari_error(0, "%s", saved);
        __atomic_add_fetch(&n_dropped, 1, __ATOMIC_RELAXED);
    }
    return p;
}

static oari_prof_thread *thread_register(void) {
    oari_prof_thread *th = quiet_alloc(sizeof *th);
    if (!th) return NULL;
    memset(th, 0, sizeof *th);
    th->gen = 0;
    th->os_tid = (long)syscall(SYS_gettid);
    char nm[16] = "";
    if (th->os_tid == (long)getpid()) snprintf(th->name, sizeof th->name, "main");
    else if (!pthread_getname_np(pthread_self(), nm, sizeof nm) && nm[0])
        snprintf(th->name, sizeof th->name, "%s/%ld", nm, th->os_tid);
    else snprintf(th->name, sizeof th->name, "thread/%ld", th->os_tid);
    pthread_mutex_lock(&list_lock);
    th->next = threads;
    threads = th;
    tls_thread = th;
    tls_epoch = __atomic_load_n(&epoch, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&list_lock);
    return th;
}

/* The calling thread's buffer, emptied if it holds an older recording. */
static oari_prof_thread *thread_buffer(void) {
    oari_prof_thread *th = tls_thread;
    if (!th || tls_epoch != __atomic_load_n(&epoch, __ATOMIC_ACQUIRE)) th = thread_register();
    if (!th) return NULL;
    unsigned g = __atomic_load_n(&cur_gen, __ATOMIC_ACQUIRE);
    if (th->gen != g) {
        __atomic_store_n(&th->spans.tail, NULL, __ATOMIC_RELEASE);
        __atomic_store_n(&th->counters.tail, NULL, __ATOMIC_RELEASE);
        __atomic_store_n(&th->gen, g, __ATOMIC_RELEASE);
    }
    return th;
}

/* A slot for one event in s; stream_commit publishes it. NULL if full and
 * no chunk could be had. */
static void *stream_slot(oari_prof_stream *s, size_t esize, int cap) {
    oari_prof_chunk *c = s->tail;
    if (c && c->n < c->cap) return c->data + (size_t)c->n * esize;
    oari_prof_chunk *next = c ? c->next : s->head;
    if (!next) {
        size_t nbytes = sizeof *next + (size_t)cap * esize;
        if (!(next = quiet_alloc(nbytes))) return NULL;
        next->next = NULL;
        next->n = 0;
        next->cap = cap;
        next->nbytes = nbytes;
        if (c) __atomic_store_n(&c->next, next, __ATOMIC_RELEASE);
        else __atomic_store_n(&s->head, next, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&next->n, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->tail, next, __ATOMIC_RELEASE);
    return next->data;
}

static void stream_commit(oari_prof_stream *s) {
    oari_prof_chunk *c = s->tail;
    __atomic_store_n(&c->n, c->n + 1, __ATOMIC_RELEASE);
}

void oari_prof_span(int kind, const char *name, int64_t t0, int n_in, oar_tensor *const *in) {
    int64_t t1 = oari_prof_now();
    oari_prof_thread *th = thread_buffer();
    if (!th) return;
    oari_prof_span_ev *e = stream_slot(&th->spans, sizeof *e, SPANS_PER_CHUNK);
    if (!e) return;
    e->name = name;
    e->t0 = t0;
    e->dur = t1 - t0;
    e->kind = (uint8_t)kind;
    e->n_in = (uint8_t)(n_in < 0 ? 0 : n_in > 255 ? 255 : n_in);
    int used = 0;
    for (int i = 0; i < OARI_PROF_SHAPES; i++) {
        const oar_tensor *t = i < n_in && in ? in[i] : NULL;
        if (!t) e->ndim[i] = OARI_PROF_NULL_INPUT;
        else if (used + t->ndim > OARI_PROF_DIMS) e->ndim[i] = OARI_PROF_NOT_KEPT;
        else {
            e->ndim[i] = (int8_t)t->ndim;
            memcpy(e->dims + used, t->shape, (size_t)t->ndim * sizeof *t->shape);
            used += t->ndim;
        }
    }
    stream_commit(&th->spans);
}

void oari_prof_memory(size_t bytes_in_use, int delta) {
    int64_t t = oari_prof_now();
    oari_prof_thread *th = thread_buffer();
    if (!th) return;
    oari_prof_counter_ev *e = stream_slot(&th->counters, sizeof *e, COUNTERS_PER_CHUNK);
    if (!e) return;
    e->t = t;
    e->bytes = (int64_t)bytes_in_use;
    e->delta = delta;
    stream_commit(&th->counters);
}

/* ---- reading (under ctl_lock, while not recording) ---------------------- */

static bool thread_in_session(const oari_prof_thread *th) {
    return session.have_data && __atomic_load_n(&th->gen, __ATOMIC_ACQUIRE) == session.gen;
}

void oari_prof_each_span(const oari_prof_thread *th, oari_prof_span_fn fn, void *ctx) {
    if (!thread_in_session(th)) return;
    oari_prof_chunk *tail = __atomic_load_n(&th->spans.tail, __ATOMIC_ACQUIRE);
    for (oari_prof_chunk *c = tail ? __atomic_load_n(&th->spans.head, __ATOMIC_ACQUIRE) : NULL; c;
         c = __atomic_load_n(&c->next, __ATOMIC_ACQUIRE)) {
        int n = __atomic_load_n(&c->n, __ATOMIC_ACQUIRE);
        const oari_prof_span_ev *ev = (const oari_prof_span_ev *)(const void *)c->data;
        for (int i = 0; i < n; i++)
            if (ev[i].t0 >= session.t_start) fn(ctx, th, &ev[i]);
        if (c == tail) break;
    }
}

void oari_prof_each_counter(const oari_prof_thread *th, oari_prof_counter_fn fn, void *ctx) {
    if (!thread_in_session(th)) return;
    oari_prof_chunk *tail = __atomic_load_n(&th->counters.tail, __ATOMIC_ACQUIRE);
    for (oari_prof_chunk *c = tail ? __atomic_load_n(&th->counters.head, __ATOMIC_ACQUIRE) : NULL;
         c; c = __atomic_load_n(&c->next, __ATOMIC_ACQUIRE)) {
        int n = __atomic_load_n(&c->n, __ATOMIC_ACQUIRE);
        const oari_prof_counter_ev *ev = (const oari_prof_counter_ev *)(const void *)c->data;
        for (int i = 0; i < n; i++)
            if (ev[i].t >= session.t_start) fn(ctx, th, &ev[i]);
        if (c == tail) break;
    }
}

int64_t oari_prof_dropped(void) { return __atomic_load_n(&n_dropped, __ATOMIC_RELAXED); }

/* ---- the session ------------------------------------------------------- */

int oar_profiler_start(void) {
#ifdef OARI_PROF_DISABLED
    return oari_error(OAR_ERR_UNSUPPORTED, "oar_profiler_start: this build of oar has the profiler "
                      "hooks compiled out (OARI_PROF_DISABLED); rebuild without it");
#endif
    pthread_mutex_lock(&ctl_lock);
    if (session.recording) {
        pthread_mutex_unlock(&ctl_lock);
        return oari_error(OAR_ERR_STATE, "oar_profiler_start: already recording (started by an "
                          "earlier call or by OAR_PROFILE); call oar_profiler_stop first");
    }
    session.gen++;
    __atomic_store_n(&cur_gen, session.gen, __ATOMIC_RELEASE);
    __atomic_store_n(&n_dropped, 0, __ATOMIC_RELAXED);
    session.recording = true;
    session.have_data = false;
    session.t_start = oari_prof_now();
    __atomic_store_n(&oari_prof_on, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&oari_memory_observer, oari_prof_memory, __ATOMIC_RELEASE);
    oar_memory_stats m;
    oar_memory_stats_get(&m);
    session.start_bytes = m.bytes_in_use;
    pthread_mutex_unlock(&ctl_lock);
    return 0;
}

int oar_profiler_stop(void) {
    pthread_mutex_lock(&ctl_lock);
    if (!session.recording) {
        pthread_mutex_unlock(&ctl_lock);
        return oari_error(OAR_ERR_STATE, "oar_profiler_stop: the profiler is not recording; call "
                          "oar_profiler_start first");
    }
    __atomic_store_n(&oari_prof_on, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&oari_memory_observer, NULL, __ATOMIC_RELEASE);
    session.t_stop = oari_prof_now();
    oar_memory_stats m;
    oar_memory_stats_get(&m);
    session.end_bytes = m.bytes_in_use;
    session.recording = false;
    session.have_data = true;
    pthread_mutex_unlock(&ctl_lock);
    return 0;
}

bool oar_profiler_is_recording(void) {
    return __atomic_load_n(&oari_prof_on, __ATOMIC_ACQUIRE) != 0;
}

static void stream_free(oari_prof_stream *s) {
    for (oari_prof_chunk *c = s->head, *next; c; c = next) {
        next = c->next;
        oari_free(c, c->nbytes);
    }
    s->head = s->tail = NULL;
}

int oar_profiler_reset(void) {
    pthread_mutex_lock(&ctl_lock);
    if (session.recording) {
        pthread_mutex_unlock(&ctl_lock);
        return oari_error(OAR_ERR_STATE, "oar_profiler_reset: the profiler is recording; call "
                          "oar_profiler_stop first");
    }
    pthread_mutex_lock(&list_lock);
    oari_prof_thread *list = threads;
    threads = NULL;
    __atomic_add_fetch(&epoch, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&list_lock);
    for (oari_prof_thread *th = list, *next; th; th = next) {
        next = th->next;
        stream_free(&th->spans);
        stream_free(&th->counters);
        oari_free(th, sizeof *th);
    }
    session.have_data = false;
    pthread_mutex_unlock(&ctl_lock);
    return 0;
}

/* ---- OAR_PROFILE=path: record the whole program ------------------------- */

static char env_path[4096];
static pid_t env_pid;

static void env_finish(void) {
    if (getpid() != env_pid) return; /* a forked child: the parent writes */
    if (oar_profiler_is_recording()) oar_profiler_stop();
    if (oar_profiler_write_trace(env_path)) {
        fprintf(stderr, "oar: OAR_PROFILE: %s\n", oar_last_error());
        return;
    }
    oar_profiler_totals tot;
    if (!oar_profiler_totals_get(&tot))
        fprintf(stderr, "oar: OAR_PROFILE: wrote %s (%lld events)\n", env_path,
                (long long)tot.n_events);
    oar_profiler_summary_write(stderr);
}

__attribute__((constructor)) static void env_init(void) {
    const char *p = getenv("OAR_PROFILE");
    if (!p || !*p) return;
    if (strlen(p) >= sizeof env_path) {
        fprintf(stderr, "oar: OAR_PROFILE: the path is too long; not profiling\n");
        return;
    }
    snprintf(env_path, sizeof env_path, "%s", p);
    if (oar_profiler_start()) {
        fprintf(stderr, "oar: OAR_PROFILE: %s\n", oar_last_error());
        oar_clear_error();
        return;
    }
    env_pid = getpid();
    /* say now, not only at exit, when the trace cannot be written there */
    char dir[sizeof env_path];
    snprintf(dir, sizeof dir, "%s", env_path);
    char *slash = strrchr(dir, '/');
    if (slash) slash[slash == dir] = 0; /* "/x.json" -> "/" */
    if (access(slash ? dir : ".", W_OK))
        fprintf(stderr, "oar: OAR_PROFILE: the folder of %s is not writable; the trace will be "
                "lost (recording anyway)\n", env_path);
    if (atexit(env_finish)) fprintf(stderr, "oar: OAR_PROFILE: cannot register the exit handler\n");
}
