/* A growable string for generated source (src/compiler/). Appends after an
 * allocation failure are dropped and remembered in `failed`, so a writer
 * checks once at the end instead of after every line. */
#ifndef OARI_SBUF_H
#define OARI_SBUF_H

#include "../core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct oari_sbuf {
    char *s;        /* NUL-terminated; NULL until the first append */
    size_t len, cap;
    bool failed;
} oari_sbuf;

/* Room for n more bytes and the NUL; false (and `failed`) when there is none. */
static inline bool oari_sbuf_reserve(oari_sbuf *b, size_t n) {
    if (b->failed) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *s = oari_realloc(b->s, b->cap, cap);
        if (!s) { b->failed = true; return false; }
        b->s = s;
        b->cap = cap;
    }
    return true;
}

static inline void oari_sbuf_vprintf(oari_sbuf *b, const char *fmt, va_list ap) {
    if (b->failed) return;
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) { b->failed = true; return; }
    if (!oari_sbuf_reserve(b, (size_t)n)) return;
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

/* Appends n bytes of s as they are (no format: the C prelude is tens of
 * kilobytes, copied on every compile). */
static inline void oari_sbuf_putn(oari_sbuf *b, const char *s, size_t n) {
    if (!oari_sbuf_reserve(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static inline OARI_PRINTF(2, 3) void oari_sbuf_printf(oari_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oari_sbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

static inline void oari_sbuf_puts(oari_sbuf *b, const char *s) { oari_sbuf_putn(b, s, strlen(s)); }

/* The text so far ("" when empty); borrowed. */
static inline const char *oari_sbuf_str(const oari_sbuf *b) { return b->s ? b->s : ""; }

static inline void oari_sbuf_free(oari_sbuf *b) {
    oari_free(b->s, b->cap);
    memset(b, 0, sizeof *b);
}

#endif
