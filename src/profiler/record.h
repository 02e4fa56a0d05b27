/* The profiler's event storage, shared by record.c (writing, sessions) and
 * report.c (trace, summary). Each thread appends to its own buffer of
 * chunks; a chunk's count is published with a release store, so a reader
 * sees whole events only, without a lock per event. */
#ifndef OARI_PROF_RECORD_H
#define OARI_PROF_RECORD_H

#include "../core/core.h"
#include "hooks.h"

#define OARI_PROF_SHAPES 4 /* input shapes kept per span */
#define OARI_PROF_DIMS 16  /* dims kept per span, all shapes together */

/* ndim[i] for an input that is NULL, or whose shape did not fit. */
#define OARI_PROF_NULL_INPUT (-1)
#define OARI_PROF_NOT_KEPT (-2)

typedef struct oari_prof_span_ev {
    const char *name; /* static string */
    int64_t t0, dur;  /* ns (monotonic clock) */
    uint8_t kind;     /* oar_profiler_kind */
    uint8_t n_in;     /* inputs of the call (shapes kept for the first OARI_PROF_SHAPES) */
    int8_t ndim[OARI_PROF_SHAPES];
    int64_t dims[OARI_PROF_DIMS]; /* the kept shapes, one after the other */
} oari_prof_span_ev;

typedef struct oari_prof_counter_ev {
    int64_t t;     /* ns */
    int64_t bytes; /* storage bytes in use */
    int32_t delta; /* 1 allocation, -1 free */
} oari_prof_counter_ev;

typedef struct oari_prof_chunk {
    struct oari_prof_chunk *next;
    int n;   /* events written; release-stored by the owner */
    int cap;
    size_t nbytes;
    _Alignas(8) unsigned char data[];
} oari_prof_chunk;

typedef struct oari_prof_stream {
    oari_prof_chunk *head; /* chunks are kept and reused across recordings */
    oari_prof_chunk *tail; /* the chunk being written; NULL: none yet this recording */
} oari_prof_stream;

typedef struct oari_prof_thread {
    struct oari_prof_thread *next;
    unsigned gen;           /* the recording its events belong to */
    long os_tid;
    char name[32];
    oari_prof_stream spans, counters;
    int64_t dropped;
} oari_prof_thread;

/* The state of the last (or current) recording; set under the control
 * lock. */
typedef struct oari_prof_session {
    bool recording, have_data;
    unsigned gen;
    int64_t t_start, t_stop;
    size_t start_bytes, end_bytes;
} oari_prof_session;

/* The control lock is held by every public function of the profiler. */
OARI_HIDDEN void oari_prof_lock(void);
OARI_HIDDEN void oari_prof_unlock(void);
/* Under the control lock. */
OARI_HIDDEN const oari_prof_session *oari_prof_session_get(void);
/* The first thread buffer (walk ->next); read under the control lock. */
OARI_HIDDEN oari_prof_thread *oari_prof_threads(void);

/* Calls fn for each span / counter event of the last recording in th. */
typedef void (*oari_prof_span_fn)(void *ctx, const oari_prof_thread *th, const oari_prof_span_ev *e);
typedef void (*oari_prof_counter_fn)(void *ctx, const oari_prof_thread *th,
                                     const oari_prof_counter_ev *e);
OARI_HIDDEN void oari_prof_each_span(const oari_prof_thread *th, oari_prof_span_fn fn, void *ctx);
OARI_HIDDEN void oari_prof_each_counter(const oari_prof_thread *th, oari_prof_counter_fn fn,
                                        void *ctx);

/* Events lost since the last start because a buffer could not grow. */
OARI_HIDDEN int64_t oari_prof_dropped(void);

/* "op", "backward", "optim", "data". */
OARI_HIDDEN const char *oari_prof_kind_name(int kind);

#endif
