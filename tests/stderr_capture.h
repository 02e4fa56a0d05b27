/* For tests that check what oar writes to stderr (warnings through
 * oari_log): stderr redirected into a temporary file between
 * capture_begin and capture_end, and a substring counter. */
#ifndef OAR_TEST_STDERR_CAPTURE_H
#define OAR_TEST_STDERR_CAPTURE_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int saved_fd = -1;
static FILE *capture;

static void capture_begin(void) {
    fflush(stderr);
    capture = tmpfile();
    saved_fd = dup(fileno(stderr));
    dup2(fileno(capture), fileno(stderr));
}

/* What was written since capture_begin (a static buffer, terminated). */
static const char *capture_end(void) {
    static char buf[8192];
    fflush(stderr);
    dup2(saved_fd, fileno(stderr));
    close(saved_fd);
    rewind(capture);
    size_t n = fread(buf, 1, sizeof buf - 1, capture);
    buf[n] = 0;
    fclose(capture);
    return buf;
}

/* How many times needle occurs in hay (not overlapping). */
static inline int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

#endif
