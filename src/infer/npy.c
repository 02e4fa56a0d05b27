/* NumPy .npy files: the format's magic, version, a Python-literal header
 * (descr, fortran_order, shape) padded to 64 bytes, then the raw data. */
#include "../core/core.h"

#include "../io/file.h"
#include <errno.h>
#include <oar/infer.h>
#include <oar/ops.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct { const char *descr; oar_dtype dtype; } npy_types[] = {
    {"b1", OAR_BOOL}, {"u1", OAR_U8}, {"i1", OAR_I8}, {"i4", OAR_I32}, {"i8", OAR_I64}, {"f2", OAR_F16},
    {"f4", OAR_F32}, {"f8", OAR_F64}, {"c8", OAR_C64}, {"c16", OAR_C128},
};

static int io_error(const char *path, const char *what) {
    return oari_error(OAR_ERR_IO, "npy: %s: %s", path, what);
}

/* The value text after 'key': in the header dict, or NULL. */
static const char *find_key(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == ':') p++;
    return p;
}

oar_tensor *oar_npy_load(const char *path) {
    if (!path) return oari_error(OAR_ERR_INVALID, "npy_load: path is NULL"), NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return oari_error(OAR_ERR_IO, "npy: %s: cannot open: %s", path, strerror(errno)), NULL;
    unsigned char pre[12];
    char *header = NULL;
    size_t hlen = 0;
    oar_tensor *t = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
        io_error(path, "not a .npy file (bad magic)");
        goto done;
    }
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            io_error(path, "truncated header");
            goto done;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        oari_error(OAR_ERR_IO, "npy: %s: unsupported format version %d.%d", path, pre[6], pre[7]);
        goto done;
    }
    if (hlen > (1u << 20) || !(header = oari_malloc(hlen + 1))) {
        if (hlen > (1u << 20)) io_error(path, "header too large");
        goto done;
    }
    if (fread(header, 1, hlen, f) != hlen) {
        io_error(path, "truncated header");
        goto done;
    }
    header[hlen] = 0;
    const char *d = find_key(header, "descr"), *fo = find_key(header, "fortran_order"),
               *sh = find_key(header, "shape");
    if (!d || !fo || !sh || *d != '\'' || !d[1] || *sh != '(') { /* d[1]: "'descr': '" ends the header */
        io_error(path, "header lacks descr, fortran_order or shape");
        goto done;
    }
    char order = d[1];
    const char *code = d + 2;
    oar_dtype dtype = OAR_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++) {
        size_t n = strlen(npy_types[i].descr);
        if (!strncmp(code, npy_types[i].descr, n) && code[n] == '\'') dtype = npy_types[i].dtype;
    }
    if (dtype == OAR_DTYPE_INVALID || (order == '>' && oar_dtype_size(dtype) > 1) ||
        (order != '<' && order != '|' && order != '=' && order != '>')) {
        char msg[96];
        const char *q = strchr(d + 1, '\'');
        snprintf(msg, sizeof msg, "unsupported dtype %.*s (little-endian b1 u1 i4 i8 f2 f4 f8 c8 c16)",
                 q ? (int)(q - d - 1) : 8, d + 1);
        io_error(path, msg);
        goto done;
    }
    bool fortran = !strncmp(fo, "True", 4);
    int64_t shape[OAR_MAX_DIMS];
    int ndim = 0;
    const char *p = sh + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || ndim == OAR_MAX_DIMS) {
            io_error(path, "bad shape (or more than 8 dims)");
            goto done;
        }
        shape[ndim++] = v;
        p = end;
    }
    int64_t rshape[OAR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) rshape[i] = fortran ? shape[ndim - 1 - i] : shape[i];
    /* the data the shape declares must be in the file before it is allocated */
    uint64_t nbytes;
    if (oari_load_shape("npy", path, "the shape", ndim, rshape, oar_dtype_size(dtype), oari_file_remaining(f),
                        &nbytes))
        goto done;
    oar_tensor *raw = oari_tensor_empty(NULL, dtype, ndim, rshape);
    if (!raw) goto done;
    if (fread(oar_tensor_data(raw), 1, nbytes, f) != nbytes) {
        oar_tensor_release(raw);
        char msg[96];
        snprintf(msg, sizeof msg, "truncated data (expected %llu bytes)", (unsigned long long)nbytes);
        io_error(path, msg);
        goto done;
    }
    if (!fortran || ndim < 2) {
        t = raw;
    } else { /* reverse the dims, then copy to C order */
        int64_t perm[OAR_MAX_DIMS];
        for (int i = 0; i < ndim; i++) perm[i] = ndim - 1 - i;
        oar_pool *pool = oar_pool_push();
        oar_tensor *c = oar_contiguous(oar_permute(raw, perm));
        t = oar_tensor_retain(c);
        oar_pool_pop(pool);
        oar_tensor_release(raw);
    }
done:
    fclose(f);
    if (header) oari_free(header, hlen + 1);
    return t;
}

int oar_npy_save(const char *path, const oar_tensor *t) {
    if (!path || !t) return oari_error(OAR_ERR_INVALID, "npy_save: path or tensor is NULL");
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
        if (npy_types[i].dtype == t->dtype) descr = npy_types[i].descr;
    if (!descr)
        return oari_error(OAR_ERR_INVALID, "npy_save: %s has no NumPy dtype; cast it (to float32)",
                          oar_dtype_name(t->dtype));
    char header[512];
    int n = snprintf(header, sizeof header, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                     oar_dtype_size(t->dtype) == 1 ? '|' : '<', descr);
    for (int d = 0; d < t->ndim; d++)
        n += snprintf(header + n, sizeof header - (size_t)n, "%lld,%s", (long long)t->shape[d],
                      d + 1 < t->ndim ? " " : "");
    if (t->ndim > 1) n--; /* "(2, 3)" rather than "(2, 3,)" */
    n += snprintf(header + n, sizeof header - (size_t)n, "), }");
    int total = (10 + n + 1 + 63) / 64 * 64; /* magic..header..'\n' padded to 64 */
    while (10 + n + 1 < total) header[n++] = ' ';
    header[n++] = '\n';
    oar_pool *pool = oar_pool_push();
    oar_tensor *c = oar_contiguous((oar_tensor *)t);
    const void *data = c ? oar_tensor_data(c) : NULL;
    int st = 0;
    if (!data) {
        st = c ? oari_error(OAR_ERR_INVALID, "npy_save: tensor is not on the CPU") : oari_fail_status();
        oar_pool_pop(pool);
        return st;
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff),
                             (unsigned char)(n >> 8)};
    size_t nbytes = (size_t)c->numel * oar_dtype_size(c->dtype);
    oari_wfile w;
    st = oari_wfile_open(&w, path, "npy_save");
    if (!st) st = oari_wfile_write(&w, pre, 10);
    if (!st) st = oari_wfile_write(&w, header, (size_t)n);
    if (!st) st = oari_wfile_write(&w, data, nbytes);
    if (!st) st = oari_wfile_commit(&w);
    oar_pool_pop(pool);
    return st;
}
