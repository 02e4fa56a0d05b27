/* IDX files (the MNIST format): a 4-byte magic (0, 0, type, ndim),
 * big-endian u32 dims, then big-endian data. Read through zlib, which
 * reads gzip and plain files alike. */
#include "../core/core.h"

#include "../io/file.h"
#include <errno.h>
#include <stdio.h>
#include <oar/data.h>
#include <string.h>
#include <zlib.h>

/* Refuse anything larger: no IDX data set comes close. */
#define MAX_BYTES ((uint64_t)1 << 32)

/* Reads exactly n bytes; 0, or an error naming what was being read. */
static int read_exact(gzFile f, const char *path, void *buf, size_t n, const char *what) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int k = gzread(f, (char *)buf + got, chunk);
        if (k < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            return oari_error(OAR_ERR_IO, "idx_load: %s: corrupt data while reading %s (%s)", path,
                              what, msg ? msg : "zlib error");
        }
        if (k == 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr != Z_OK && zerr != Z_BUF_ERROR)
                return oari_error(OAR_ERR_IO, "idx_load: %s: corrupt data while reading %s (%s)",
                                  path, what, msg);
            return oari_error(OAR_ERR_IO,
                              "idx_load: %s: file truncated: %s needs %zu bytes, got "
                              "%zu",
                              path, what, n, got);
        }
        got += (size_t)k;
    }
    return 0;
}

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

oar_tensor *oar_idx_load(const char *path) {
    if (!path) return oari_error(OAR_ERR_INVALID, "idx_load: path is NULL"), NULL;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return oari_error(OAR_ERR_IO, "idx_load: cannot open %s: %s", path,
                          errno ? strerror(errno) : "out of memory"),
               NULL;
    unsigned char head[4 + 4 * OAR_MAX_DIMS];
    unsigned char *raw = NULL;
    size_t nbytes = 0, cap = 0;
    oar_tensor *t = NULL;
    int st = read_exact(f, path, head, 4, "the magic number");
    if (st) goto out;
    int type = head[2], ndim = head[3];
    size_t esize;
    oar_dtype dtype;
    switch (type) {
    case 0x08:
        esize = 1, dtype = OAR_U8;
        break;
    case 0x09:
        esize = 1, dtype = OAR_I32;
        break;
    case 0x0B:
        esize = 2, dtype = OAR_I32;
        break;
    case 0x0C:
        esize = 4, dtype = OAR_I32;
        break;
    case 0x0D:
        esize = 4, dtype = OAR_F32;
        break;
    case 0x0E:
        esize = 8, dtype = OAR_F64;
        break;
    default:
        esize = 0, dtype = OAR_U8;
        break;
    }
    if (head[0] || head[1] || !esize || ndim < 1 || ndim > OAR_MAX_DIMS) {
        st = oari_error(OAR_ERR_IO,
                        "idx_load: %s: not an IDX file (magic %02x %02x %02x %02x; "
                        "expected 00 00, a type 08-0e and 1 to 8 dims)",
                        path, head[0], head[1], head[2], head[3]);
        goto out;
    }
    if ((st = read_exact(f, path, head + 4, 4 * (size_t)ndim, "the dims"))) goto out;
    int64_t shape[OAR_MAX_DIMS];
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = be32(head + 4 + 4 * i);
        count *= (uint64_t)shape[i];
        if (count * esize > MAX_BYTES) {
            st = oari_error(OAR_ERR_IO,
                            "idx_load: %s: dims claim more than 4 GiB (corrupt header?)", path);
            goto out;
        }
    }
    /* (the data is read as it arrives, so a short file fails before the
     * dims' size is allocated; the limit holds the rest) */
    uint64_t declared;
    if ((st = oari_load_shape("idx_load", path, "the dims", ndim, shape, esize, UINT64_MAX, &declared))) goto out;
    nbytes = (size_t)(count * esize);
    /* Grow the buffer as data arrives, so a lying header cannot make us
     * allocate more than the file holds (plus one doubling). */
    size_t got = 0;
    while (got < nbytes) {
        if (got == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 20;
            if (ncap > nbytes) ncap = nbytes;
            unsigned char *r = oari_realloc(raw, cap, ncap);
            if (!r) {
                st = oari_fail_status();
                goto out;
            }
            raw = r;
            cap = ncap;
        }
        if ((st = read_exact(f, path, raw + got, cap - got, "the data"))) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", oar_last_error());
            if (strstr(msg, "truncated"))
                st = oari_error(OAR_ERR_IO,
                                "idx_load: %s: file truncated: the dims need %zu data "
                                "bytes, the file has fewer",
                                path, nbytes);
            goto out;
        }
        got = cap;
    }
    /* The data must end the file: a gzip stream cut inside its last block
     * or trailer can still deliver every byte, so check for a clean end. */
    {
        unsigned char extra;
        int k = gzread(f, &extra, 1), zerr = Z_OK;
        const char *msg = k <= 0 ? gzerror(f, &zerr) : NULL;
        if (k > 0) {
            st = oari_error(OAR_ERR_IO,
                            "idx_load: %s: data continues past the %zu bytes the dims "
                            "describe (corrupt header?)",
                            path, nbytes);
        } else if (k < 0 || zerr != Z_OK) {
            st = oari_error(OAR_ERR_IO,
                            "idx_load: %s: file truncated or corrupt at the end of the "
                            "data (%s)",
                            path, msg ? msg : "zlib error");
        }
        if (st) goto out;
    }
    t = oari_tensor_empty(NULL, dtype, ndim, shape);
    if (!t) {
        st = oari_fail_status();
        goto out;
    }
    void *dst = t->storage->data;
    for (uint64_t i = 0; i < count; i++) {
        const unsigned char *p = raw + i * esize;
        switch (type) {
        case 0x08:
            ((uint8_t *)dst)[i] = p[0];
            break;
        case 0x09:
            ((int32_t *)dst)[i] = (int8_t)p[0];
            break;
        case 0x0B:
            ((int32_t *)dst)[i] = (int16_t)((uint16_t)p[0] << 8 | p[1]);
            break;
        case 0x0C:
            ((int32_t *)dst)[i] = (int32_t)be32(p);
            break;
        case 0x0D: {
            uint32_t u = be32(p);
            memcpy((float *)dst + i, &u, 4);
            break;
        }
        default: {
            uint64_t u = (uint64_t)be32(p) << 32 | be32(p + 4);
            memcpy((double *)dst + i, &u, 8);
            break;
        }
        }
    }
out:
    gzclose(f);
    oari_free(raw, cap);
    if (st) {
        oar_tensor_release(t);
        return NULL;
    }
    return oari_pool_adopt(t);
}
