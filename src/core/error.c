/* The per-thread error message behind oar_last_error(). */
#include "core.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];
static _Thread_local int last_status;

int oari_verror(int status, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    last_status = status;
    return status;
}

int oari_last_status(void) { return last_error[0] ? last_status : 0; }

int oari_fail_status(void) { return last_error[0] && last_status ? last_status : OAR_ERR_NOMEM; }

int oari_error(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oari_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

int oari_nomem(const char *what) {
    return oari_error(OAR_ERR_NOMEM, "out of memory: %s", what);
}

bool oari_error_pending(void) { return last_error[0] != 0; }

int oari_null_arg(const char *fn, const char *what) {
    if (!last_error[0]) oari_error(OAR_ERR_INVALID, "%s: %s is NULL", fn, what);
    return OAR_ERR_INVALID;
}

const char *oar_last_error(void) { return last_error; }

void oar_clear_error(void) {
    last_error[0] = 0;
    last_status = 0;
}

const char *oar_status_string(int status) {
    switch (status) {
    case OAR_OK: return "ok";
    case OAR_ERR_INVALID: return "invalid argument";
    case OAR_ERR_NOMEM: return "out of memory";
    case OAR_ERR_UNSUPPORTED: return "unsupported";
    case OAR_ERR_IO: return "i/o error";
    case OAR_ERR_STATE: return "invalid state";
    default: return "unknown status";
    }
}

const char *oari_shape_str(char *buf, int ndim, const int64_t *shape) {
    int n = snprintf(buf, 200, "[");
    for (int i = 0; i < ndim && n < 180; i++)
        n += snprintf(buf + n, (size_t)(200 - n), i ? ", %lld" : "%lld", (long long)shape[i]);
    snprintf(buf + n, (size_t)(200 - n), "]");
    return buf;
}
