/* CSV files of numbers: one pass reading lines of any length, numbers
 * parsed with strtod, errors with the file name, line and column. */
#include "../core/core.h"

#include "../io/file.h"
#include <errno.h>
#include <math.h>
#include <oar/data.h>
#include <oar/io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct csv_buf {
    double *v;
    size_t n, cap;
} csv_buf;

static int push(csv_buf *b, double v, const char *path) {
    if (b->n == b->cap) {
        /* no header declares a size: the values read so far are held to the load limit */
        int st = oari_load_check("csv_load", path, "the values read", (uint64_t)(b->n + 1) * sizeof *b->v, UINT64_MAX);
        if (st) return st;
        size_t cap = b->cap ? 2 * b->cap : 256;
        if ((uint64_t)cap * sizeof *b->v > oar_load_limit()) cap = (size_t)(oar_load_limit() / sizeof *b->v);
        double *nv = oari_realloc(b->v, b->cap * sizeof *nv, cap * sizeof *nv);
        if (!nv) return oari_fail_status();
        b->v = nv;
        b->cap = cap;
    }
    b->v[b->n++] = v;
    return 0;
}

/* Reads one line (without its \n or \r\n) into *line; 1 for a line, 0 at
 * the end of the file, negative on error. */
static int read_line(FILE *f, char **line, size_t *cap) {
    size_t len = 0;
    int c;
    bool any = false;
    while ((c = fgetc(f)) != EOF) {
        any = true;
        if (c == '\n') break;
        if (len + 1 >= *cap) {
            size_t ncap = *cap ? 2 * *cap : 256;
            char *nl = oari_realloc(*line, *cap, ncap);
            if (!nl) return oari_fail_status();
            *line = nl;
            *cap = ncap;
        }
        (*line)[len++] = (char)c;
    }
    if (!any) return 0;
    if (len && (*line)[len - 1] == '\r') len--;
    if (!*line) {
        *line = oari_malloc(1);
        if (!*line) return oari_fail_status();
        *cap = 1;
    }
    (*line)[len] = 0;
    return 1;
}

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t') return false;
    return true;
}

oar_tensor *oar_csv_load(const char *path, const oar_csv_options *opt) {
    oar_csv_options o = opt ? *opt : (oar_csv_options){0};
    if (o.delimiter == 0) o.delimiter = ',';
    if (o.dtype == OAR_BOOL) o.dtype = OAR_F32;
    if (!path) return oari_error(OAR_ERR_INVALID, "csv_load: path is NULL"), NULL;
    if (o.dtype != OAR_F32 && o.dtype != OAR_F64)
        return oari_error(OAR_ERR_INVALID, "csv_load: dtype %s is not float32 or float64",
                          oar_dtype_name(o.dtype)),
               NULL;
    if (o.delimiter == '\n' || o.delimiter == '\r' || o.delimiter == '.' || o.delimiter == '-' ||
        o.delimiter == '+' || (o.delimiter >= '0' && o.delimiter <= '9'))
        return oari_error(OAR_ERR_INVALID, "csv_load: delimiter '%c' cannot separate numbers",
                          o.delimiter),
               NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return oari_error(OAR_ERR_IO, "csv_load: cannot open %s: %s", path, strerror(errno)),
               NULL;
    csv_buf b = {0};
    char *line = NULL;
    size_t cap = 0;
    int64_t cols = -1, rows = 0, lineno = 0;
    int st = 0, r;
    while (!st && (r = read_line(f, &line, &cap)) == 1) {
        lineno++;
        if ((lineno == 1 && o.header) || blank(line)) continue;
        int64_t col = 0;
        char *p = line;
        for (;;) {
            char *field = p, *end;
            char *delim = strchr(p, o.delimiter);
            if (delim) *delim = 0;
            errno = 0;
            double v = strtod(field, &end);
            while (*end == ' ' || *end == '\t')
                end++;
            if (end == field || *end || blank(field)) {
                char shown[48];
                snprintf(shown, sizeof shown, "%s", field);
                st = oari_error(OAR_ERR_IO,
                                "csv_load: %s: line %lld, column %lld: \"%s\" is not a number%s",
                                path, (long long)lineno, (long long)col + 1, shown,
                                lineno == 1 && !o.header ? " (a header row? set header)" : "");
                break;
            }
            if ((st = push(&b, v, path))) break;
            col++;
            if (!delim) break;
            p = delim + 1;
        }
        if (st) break;
        if (cols < 0) {
            cols = col;
        } else if (col != cols) {
            st = oari_error(OAR_ERR_IO, "csv_load: %s: line %lld has %lld columns, expected %lld",
                            path, (long long)lineno, (long long)col, (long long)cols);
        }
        rows++;
    }
    if (!st && r < 0) st = r;
    if (!st && ferror(f))
        st = oari_error(OAR_ERR_IO, "csv_load: reading %s failed: %s", path, strerror(errno));
    if (!st && rows == 0)
        st = oari_error(OAR_ERR_IO, "csv_load: %s holds no rows of numbers", path);
    fclose(f);
    oari_free(line, cap);
    oar_tensor *t = NULL;
    if (!st) {
        int64_t shape[2] = {rows, cols};
        t = oari_tensor_empty(NULL, o.dtype, 2, shape);
        if (t) {
            if (o.dtype == OAR_F64)
                memcpy(t->storage->data, b.v, b.n * sizeof *b.v);
            else
                for (size_t i = 0; i < b.n; i++)
                    ((float *)t->storage->data)[i] = (float)b.v[i];
        }
    }
    oari_free(b.v, b.cap * sizeof *b.v);
    return t ? oari_pool_adopt(t) : NULL;
}
