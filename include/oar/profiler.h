/* The profiler: records every op call (name, input shapes, start,
 * duration, thread), every autograd backward node, optimizer steps, loader
 * batches and the tensor-storage bytes in use over time; writes a Chrome
 * trace (open it in https://ui.perfetto.dev or chrome://tracing) and a
 * summary table by op.
 *
 *     oar_profiler_start();
 *     for (int s = 0; s < 10; s++) train_step();
 *     oar_profiler_stop();
 *     oar_profiler_write_trace("trace.json");
 *     oar_profiler_summary_write(stdout);
 *
 * Any program linked with oar can be profiled without a change: with the
 * environment variable OAR_PROFILE=trace.json, recording starts when the
 * library loads and at exit the trace is written there and the summary is
 * printed to stderr.
 *
 * Off, the cost is one predictable branch per op call. On, events go to
 * per-thread buffers without locks, so any thread (OpenMP workers, a data
 * loader thread) may run ops while recording. Times are inclusive: an op
 * that calls other ops (a cast, a composite) contains them, and a backward
 * node contains the ops of its gradient rule; self times leave them out. */
#ifndef OAR_PROFILER_H
#define OAR_PROFILER_H

#include <oar/tensor.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What an event was. Values are written in traces: append only. */
typedef enum oar_profiler_kind {
    OAR_PROFILER_OP = 0,       /* one op call through the dispatcher */
    OAR_PROFILER_BACKWARD = 1, /* one autograd node's gradient rule */
    OAR_PROFILER_OPTIM = 2,    /* one oar_optim_step */
    OAR_PROFILER_DATA = 3,     /* one oar_loader_next */
    OAR_PROFILER_KIND_COUNT
} oar_profiler_kind;

/* Starts recording, discarding the events of any earlier recording.
 * OAR_ERR_STATE if it is already recording (OAR_PROFILE starts it at load);
 * OAR_ERR_UNSUPPORTED if oar was built with the hooks compiled out
 * (-DOARI_PROF_DISABLED). */
OAR_API int oar_profiler_start(void);

/* Stops recording and keeps the events for the functions below.
 * OAR_ERR_STATE if it is not recording. */
OAR_API int oar_profiler_stop(void);

/* True while recording. */
OAR_API bool oar_profiler_is_recording(void);

/* Writes the last recording as Chrome trace JSON to path: "X" events for
 * ops (args: input shapes), backward nodes ("<op>_backward"), optimizer
 * steps and loader batches; a "C" counter "memory" (tensor-storage bytes in
 * use); "M" process and thread names. The file is written to a temporary
 * name and renamed. OAR_ERR_INVALID for a NULL path, OAR_ERR_IO if it cannot
 * be written, OAR_ERR_STATE while recording or before any recording. */
OAR_API int oar_profiler_write_trace(const char *path);

/* One row of the summary: all events of one kind and name. */
typedef struct oar_profiler_stat {
    const char *name; /* op name (borrowed, static) */
    oar_profiler_kind kind;
    int64_t calls;
    int64_t total_ns, min_ns, max_ns; /* inclusive; average = total_ns / calls */
    double share;                     /* total_ns / the recording's wall time */
    int64_t self_ns;    /* total_ns less the spans nested in them on their thread */
    double self_share;  /* self_ns / wall time: one thread's self shares add up to <= 1 */
} oar_profiler_stat;

/* The rows of the last recording, by decreasing total time. Fills up to
 * cap rows of out (out may be NULL when cap is 0) and returns the number of
 * rows there are, or a negative status (OAR_ERR_STATE while recording or
 * before any recording, OAR_ERR_INVALID for a negative cap or NULL out with
 * cap > 0, OAR_ERR_NOMEM). */
OAR_API int oar_profiler_stats(oar_profiler_stat *out, int cap);

/* Totals of the last recording. */
typedef struct oar_profiler_totals {
    int64_t wall_ns;         /* from start to stop */
    int64_t n_events;        /* spans recorded (ops, backward, optim, data) */
    int64_t n_dropped;       /* events lost because a buffer could not grow */
    int n_threads;           /* threads that recorded something */
    size_t start_bytes;      /* tensor-storage bytes in use at start */
    size_t end_bytes;        /* ... at stop */
    size_t peak_bytes;       /* their high-water mark while recording */
    int64_t n_allocs, n_frees; /* storage blocks taken and given back */
} oar_profiler_totals;

/* Fills *out. OAR_ERR_INVALID for NULL, OAR_ERR_STATE while recording or
 * before any recording. */
OAR_API int oar_profiler_totals_get(oar_profiler_totals *out);

/* The summary table (one line per row of oar_profiler_stats: kind, name,
 * calls, total ms, average, min and max us, share, self ms, self share)
 * and the memory line,
 * as text. Like snprintf: writes at most size bytes (NUL included) to buf
 * (NULL when size is 0) and returns the length of the whole text, or a
 * negative status as oar_profiler_stats. */
OAR_API int oar_profiler_summary(char *buf, size_t size);

/* Writes the same text to f. 0, or a negative status (OAR_ERR_INVALID for
 * a NULL f, OAR_ERR_IO if the write fails). */
OAR_API int oar_profiler_summary_write(FILE *f);

/* Frees the recorded events and the per-thread buffers (they are kept and
 * reused from one recording to the next otherwise). Call it while no other
 * thread runs oar. OAR_ERR_STATE while recording. */
OAR_API int oar_profiler_reset(void);

#ifdef __cplusplus
}
#endif

#endif
