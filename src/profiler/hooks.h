/* The profiler's hooks, placed in the dispatcher, the autograd engine, the
 * optimizer and the loader (the layers above the profiler); the block
 * allocator, below it, tells the profiler through oari_memory_observer.
 * Off, each costs one predictable branch on a global flag. */
#ifndef OARI_PROF_HOOKS_H
#define OARI_PROF_HOOKS_H

#include <oar/profiler.h>
#include <stddef.h>
#include <stdint.h>

/* Non-zero while recording; read relaxed, set by oar_profiler_start/stop. */
extern int oari_prof_on __attribute__((visibility("hidden")));

/* Monotonic clock in ns (never 0). */
__attribute__((visibility("hidden"))) int64_t oari_prof_now(void);
/* Records a span of `kind` that began at t0 and ends now, with the shapes
 * of in[0..n_in) (entries may be NULL; in may be NULL when n_in is 0). */
__attribute__((visibility("hidden"))) void oari_prof_span(int kind, const char *name, int64_t t0,
                                                          int n_in, oar_tensor *const *in);
/* Records the storage bytes in use after an allocation (delta 1) or a free
 * (delta -1): the allocator's observer (core.h) while recording. */
__attribute__((visibility("hidden"))) void oari_prof_memory(size_t bytes_in_use, int delta);

#ifdef OARI_PROF_DISABLED /* hooks compiled out: for measuring their cost */
#define OARI_PROF_ENABLED() 0
#else
#define OARI_PROF_ENABLED() __builtin_expect(__atomic_load_n(&oari_prof_on, __ATOMIC_RELAXED), 0)
#endif

/* int64_t t0 = OARI_PROF_BEGIN(); ... OARI_PROF_END(kind, name, t0, n_in, in);
 * BEGIN is 0 when off, and END does nothing for t0 == 0, so a recording
 * that starts or stops in between records nothing half-made. */
#define OARI_PROF_BEGIN() (OARI_PROF_ENABLED() ? oari_prof_now() : 0)
#define OARI_PROF_END(kind, name, t0, n_in, in)                                                    \
    do {                                                                                           \
        if (__builtin_expect((t0) != 0, 0)) oari_prof_span((kind), (name), (t0), (n_in), (in));   \
    } while (0)

#endif
