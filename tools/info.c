/* `oar info` on files that are not models: what kind a file is, and the
 * descriptions of .safetensors files (from the header alone, so a large
 * checkpoint is described without reading its data) and .npy files. */
#include "cli.h"

#include <oar/oar.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* the metadata entry that marks a complex tensor (include/oar/io.h) */
#ifndef OAR_SAFETENSORS_DTYPE_PREFIX
#define OAR_SAFETENSORS_DTYPE_PREFIX "oar.dtype."
#endif

cli_file_kind cli_file_kind_of(const char *path) {
    struct stat st;
    if (stat(path, &st)) return CLI_FILE_MISSING;
    if (S_ISDIR(st.st_mode)) return CLI_FILE_FOLDER;
    unsigned char b[16] = {0};
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        n = fread(b, 1, sizeof b, f);
        fclose(f);
    }
    if (n >= 6 && !memcmp(b, "\x93NUMPY", 6)) return CLI_FILE_NPY;
    if (cli_ends_with(path, ".npy")) return CLI_FILE_NPY;
    if (cli_ends_with(path, ".safetensors")) return CLI_FILE_SAFETENSORS;
    if (cli_ends_with(path, ".onnx")) return CLI_FILE_ONNX;
    if (n >= 9) { /* an 8-byte little-endian header length, then the JSON header */
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | b[i];
        if (len >= 2 && len <= (uint64_t)st.st_size - 8 && b[8] == '{') return CLI_FILE_SAFETENSORS;
    }
    return CLI_FILE_UNKNOWN;
}

/* ---- safetensors ------------------------------------------------------------ */

/* The dtypes of the safetensors format: bytes per element, and whether oar
 * loads them (include/oar/io.h). */
static const struct {
    const char *name;
    int size;
    bool oar;
} st_dtypes[] = {
    {"F64", 8, true},   {"F32", 4, true},   {"F16", 2, true},      {"BF16", 2, true},     {"I64", 8, true},
    {"I32", 4, true},   {"U8", 1, true},    {"BOOL", 1, true},     {"C64", 8, true},      {"C128", 16, true},
    {"I16", 2, false},  {"I8", 1, true},   {"U16", 2, false},     {"U32", 4, false},     {"U64", 8, false},
    {"F8_E4M3", 1, false}, {"F8_E5M2", 1, false},
};

/* A JSON number that is a whole number in 0..2^53. */
static bool as_count(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

/* Prints s on one line: control characters as \n, \t or '?', cut after max bytes. */
static void print_clean(const char *s, size_t max) {
    size_t n = 0;
    for (; *s && n < max; s++, n++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else putchar(c < 0x20 || c == 0x7f ? '?' : c);
    }
    if (*s) fputs("...", stdout);
}

static void print_bytes(uint64_t n) {
    printf("%llu bytes", (unsigned long long)n);
    if (n >= 1 << 20) printf(" (%.1f MiB)", (double)n / (1 << 20));
    else if (n >= 1 << 10) printf(" (%.1f KiB)", (double)n / (1 << 10));
}

/* The safetensors spec refuses headers over 100 MB. */
#define MAX_HEADER (100u << 20)

int cli_info_safetensors(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("info", "%s: cannot open: %s", path, strerror(errno));
    struct stat st = {0};
    unsigned char lb[8];
    char *text = NULL;
    cJSON *h = NULL;
    int rc = CLI_FAIL;
    if (fstat(fileno(f), &st) || st.st_size < 8 || fread(lb, 1, 8, f) != 8) {
        cli_fail("info", "%s: not a safetensors file: %lld bytes, fewer than the 8 of the header's length", path,
                 (long long)st.st_size);
        goto done;
    }
    uint64_t len = 0, size = (uint64_t)st.st_size;
    for (int i = 7; i >= 0; i--) len = len << 8 | lb[i];
    if (len > size - 8 || len > MAX_HEADER) {
        cli_fail("info", "%s: not a safetensors file: the header's length %llu is over %s (%llu bytes)", path,
                 (unsigned long long)len, len > size - 8 ? "what the file holds" : "the format's 100 MB",
                 (unsigned long long)(len > size - 8 ? size - 8 : MAX_HEADER));
        goto done;
    }
    if (!(text = malloc(len + 1)) || fread(text, 1, len, f) != len) {
        cli_fail("info", "%s: cannot read the header: %s", path, text ? strerror(errno) : "out of memory");
        goto done;
    }
    text[len] = 0;
    const char *end = NULL;
    h = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!cJSON_IsObject(h)) {
        size_t at = h || !end ? 0 : (size_t)(end - text);
        cli_fail("info", "%s: not a safetensors file: the header is not a JSON object (%s byte %zu of it)", path,
                 h ? "a JSON value, but not an object, at" : "invalid JSON near", at);
        goto done;
    }
    uint64_t data = size - 8 - len, total = 0, values = 0;
    int n_tensors = 0, width = 4;
    const cJSON *meta = NULL, *e;
    /* check every entry first, so a bad file prints no half description */
    cJSON_ArrayForEach(e, h) {
        if (!strcmp(e->string, "__metadata__")) {
            meta = e;
            const cJSON *kv;
            if (!cJSON_IsObject(e)) {
                cli_fail("info", "%s: the header's __metadata__ is not an object of strings", path);
                goto done;
            }
            cJSON_ArrayForEach(kv, e) if (!cJSON_IsString(kv)) {
                cli_fail("info", "%s: the header's __metadata__ \"%s\" is not a string", path, kv->string);
                goto done;
            }
            continue;
        }
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *shape = cJSON_GetObjectItemCaseSensitive(e, "shape"),
                    *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), *d;
        uint64_t b0, b1, numel = 1;
        if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || cJSON_GetArraySize(off) != 2 ||
            !as_count(cJSON_GetArrayItem(off, 0), &b0) || !as_count(cJSON_GetArrayItem(off, 1), &b1) || b1 < b0) {
            cli_fail("info", "%s: tensor \"%s\": expected {\"dtype\": \"F32\", \"shape\": [...], \"data_offsets\": "
                             "[begin, end]} in the header", path, e->string);
            goto done;
        }
        if (b1 > data) {
            cli_fail("info", "%s: tensor \"%s\": its data_offsets end at byte %llu, past the %llu bytes of data", path,
                     e->string, (unsigned long long)b1, (unsigned long long)data);
            goto done;
        }
        cJSON_ArrayForEach(d, shape) {
            uint64_t k;
            if (!as_count(d, &k) || (k && numel > UINT64_MAX / k)) {
                cli_fail("info", "%s: tensor \"%s\": its shape holds a value that is not a size", path, e->string);
                goto done;
            }
            numel *= k;
        }
        for (size_t t = 0; t < sizeof st_dtypes / sizeof *st_dtypes; t++)
            if (!strcmp(st_dtypes[t].name, dt->valuestring) && numel * (uint64_t)st_dtypes[t].size != b1 - b0) {
                cli_fail("info", "%s: tensor \"%s\": %s of %llu values needs %llu bytes, its data_offsets give %llu",
                         path, e->string, dt->valuestring, (unsigned long long)numel,
                         (unsigned long long)(numel * (uint64_t)st_dtypes[t].size), (unsigned long long)(b1 - b0));
                goto done;
            }
        n_tensors++;
        total += b1 - b0;
        values += numel;
        int w = (int)strlen(e->string);
        if (w > width) width = w < 48 ? w : 48;
    }
    printf("safetensors: %s (", path);
    print_bytes(size);
    printf(")\n");
    if (!meta || !cJSON_GetArraySize(meta)) printf("metadata: none\n");
    else {
        printf("metadata:\n");
        const cJSON *kv;
        cJSON_ArrayForEach(kv, meta) {
            printf("  ");
            print_clean(kv->string, 64);
            printf(": ");
            print_clean(kv->valuestring, 200);
            printf("\n");
        }
    }
    printf("tensors: %d\n", n_tensors);
    bool foreign = false;
    cJSON_ArrayForEach(e, h) {
        if (!strcmp(e->string, "__metadata__")) continue;
        const char *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring;
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), *d;
        int known = -1;
        for (size_t t = 0; t < sizeof st_dtypes / sizeof *st_dtypes; t++)
            if (!strcmp(st_dtypes[t].name, dt)) known = (int)t;
        printf("  %-*s  %-5s [", width, e->string, dt);
        bool first = true;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(e, "shape")) {
            printf("%s%.0f", first ? "" : ", ", d->valuedouble);
            first = false;
        }
        printf("]  %.0f bytes", cJSON_GetArrayItem(off, 1)->valuedouble - cJSON_GetArrayItem(off, 0)->valuedouble);
        /* a complex tensor, stored as floats with a trailing dim of 2 */
        char key[300];
        snprintf(key, sizeof key, "%s%s", OAR_SAFETENSORS_DTYPE_PREFIX, e->string);
        const cJSON *as = meta ? cJSON_GetObjectItemCaseSensitive(meta, key) : NULL;
        if (as) printf("  (%s to oar)", as->valuestring);
        printf("%s\n", known < 0                ? "  (a dtype oar does not know)"
                       : !st_dtypes[known].oar ? "  (a dtype oar does not load)"
                                               : "");
        foreign |= known < 0 || !st_dtypes[known].oar;
    }
    printf("total: %d tensor%s, %llu values, ", n_tensors, n_tensors == 1 ? "" : "s", (unsigned long long)values);
    print_bytes(total);
    printf(" of data\n");
    if (foreign) printf("note: oar_safetensors_load refuses this file (dtypes oar has: F16 BF16 F32 F64 I32 I64 U8 BOOL C64 C128)\n");
    rc = CLI_OK;
done:
    cJSON_Delete(h);
    free(text);
    fclose(f);
    return rc;
}

/* ---- npy ------------------------------------------------------------------------ */

#define NPY_SHOWN 8 /* values printed: the first 6 and the last 2 of a longer array */

int cli_info_npy(const char *path) {
    oar_tensor *t = oar_npy_load(path);
    if (!t) return cli_fail("info", "%s", oar_last_error());
    oar_dtype dt = oar_tensor_dtype(t);
    int64_t n = oar_tensor_numel(t);
    struct stat st;
    printf("npy: %s (", path);
    print_bytes(stat(path, &st) ? 0 : (uint64_t)st.st_size);
    printf(")\ndtype: %s\nshape: [", oar_dtype_name(dt));
    for (int d = 0; d < oar_tensor_ndim(t); d++) printf("%s%lld", d ? ", " : "", (long long)oar_tensor_shape(t)[d]);
    printf("] (%lld value%s, ", (long long)n, n == 1 ? "" : "s");
    print_bytes((uint64_t)n * oar_dtype_size(dt));
    printf(")\n");
    int rc = CLI_OK;
    bool cplx = oar_dtype_is_complex(dt);
    /* the values as double (complex: pairs), int64 exactly */
    oar_pool *pool = oar_pool_push();
    oar_tensor *h = dt == OAR_I64 ? t : oar_cast(t, cplx ? OAR_C128 : OAR_F64);
    size_t es = oar_dtype_size(oar_tensor_dtype(h)), bytes = (size_t)n * es;
    void *buf = n ? malloc(bytes) : NULL;
    if (n && (!h || !buf || oar_tensor_to_host(h, buf, bytes))) {
        rc = buf ? cli_fail("info", "%s: %s", path, oar_last_error()) : cli_fail("info", "%s: out of memory", path);
        goto done;
    }
    const double *f = buf;
    const long long *l = buf;
    printf("values:");
    for (int64_t i = 0; i < n; i++) {
        if (n > NPY_SHOWN && i == NPY_SHOWN - 2) {
            printf(" ...,");
            i = n - 2;
        }
        if (dt == OAR_I64) printf(" %lld", l[i]);
        else if (dt == OAR_BOOL) printf(" %s", f[i] ? "true" : "false");
        else if (cplx) printf(" %.6g%+.6gj", f[2 * i], f[2 * i + 1]);
        else printf(" %.6g", f[i]);
        if (i + 1 < n) putchar(',');
    }
    printf("%s\n", n ? "" : " none");
    if (!n || cplx) goto done;
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    int64_t finite = 0, nans = 0, infs = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = dt == OAR_I64 ? (double)l[i] : f[i];
        if (isnan(v)) nans++;
        else if (isinf(v)) infs++;
        else {
            finite++;
            lo = fmin(lo, v);
            hi = fmax(hi, v);
            sum += v;
        }
    }
    double mean = finite ? sum / (double)finite : NAN;
    for (int64_t i = 0; i < n; i++) {
        double v = dt == OAR_I64 ? (double)l[i] : f[i];
        if (isfinite(v)) sq += (v - mean) * (v - mean);
    }
    if (dt == OAR_BOOL) printf("true: %.0f of %lld\n", sum, (long long)n);
    else if (finite)
        printf("min %.6g  max %.6g  mean %.6g  std %.6g\n", lo, hi, mean, sqrt(sq / (double)finite));
    if (nans || infs)
        printf("non-finite: %lld NaN, %lld inf (left out of the statistics)\n", (long long)nans, (long long)infs);
done:
    free(buf);
    oar_pool_pop(pool);
    oar_tensor_release(t);
    return rc;
}
