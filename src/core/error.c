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

int oar_set_error(int status, const char *fmt, ...) {
    if (!status) status = OAR_ERR_INVALID;
    if (!fmt) return oari_error(status, "(no message)");
    va_list ap;
    va_start(ap, fmt);
    oari_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

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

oari_size_namer_fn oari_size_namer;

const char *oari_size_str(char *buf, int64_t size) {
    oari_size_namer_fn namer = oari_size_namer;
    if (!namer || !namer(size, buf, 64)) snprintf(buf, 64, "%lld", (long long)size);
    return buf;
}

const char *oari_shape_str(char *buf, int ndim, const int64_t *shape) {
    /* (a dim's name may be long: stop with "..." before the end of buf) */
    size_t n = 1;
    buf[0] = '[';
    for (int i = 0; i < ndim; i++) {
        char d[64];
        oari_size_str(d, shape[i]);
        size_t need = strlen(d) + (i ? 2 : 0);
        if (n + need > 200 - 7) {
            memcpy(buf + n, ", ...", 5);
            n += 5;
            break;
        }
        if (i) buf[n++] = ',', buf[n++] = ' ';
        memcpy(buf + n, d, strlen(d));
        n += strlen(d);
    }
    buf[n++] = ']';
    buf[n] = 0;
    return buf;
}
