/* The load limit and the loaders' size checks (file.h). */
#include "file.h"

#include <oar/io.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/types.h>

static atomic_uint_fast64_t load_limit = OAR_DEFAULT_LOAD_LIMIT;

uint64_t oar_set_load_limit(uint64_t max_bytes) {
    return atomic_exchange(&load_limit, max_bytes ? max_bytes : OAR_DEFAULT_LOAD_LIMIT);
}

uint64_t oar_load_limit(void) { return atomic_load(&load_limit); }

/* ---- loading ------------------------------------------------------------------ */

int oari_load_check(const char *who, const char *file, const char *what, uint64_t declared, uint64_t present) {
    uint64_t limit = oar_load_limit();
    if (declared > limit)
        return oari_error(OAR_ERR_IO, "%s: %s: %s declares %llu bytes, over the load limit of %llu "
                          "(corrupt file? oar_set_load_limit raises it)", who, file, what,
                          (unsigned long long)declared, (unsigned long long)limit);
    if (present != UINT64_MAX && declared > present)
        return oari_error(OAR_ERR_IO, "%s: %s: %s declares %llu bytes, but the file holds %llu more "
                          "(truncated or corrupt)", who, file, what, (unsigned long long)declared,
                          (unsigned long long)present);
    return 0;
}

int oari_load_shape(const char *who, const char *file, const char *what, int ndim, const int64_t *shape,
                    size_t esize, uint64_t present, uint64_t *nbytes) {
    char buf[200];
    uint64_t span = esize ? esize : 1; /* the product of the dims, zeros as 1 */
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 1 && span > ((uint64_t)1 << 62) / (uint64_t)shape[d]))
            return oari_error(OAR_ERR_IO, "%s: %s: %s %s overflows (corrupt file?)", who, file, what,
                              oari_shape_str(buf, ndim, shape));
        if (shape[d] > 1) span *= (uint64_t)shape[d];
        empty = empty || shape[d] == 0;
    }
    *nbytes = empty ? 0 : span;
    return oari_load_check(who, file, what, *nbytes, present);
}

uint64_t oari_file_remaining(FILE *f) {
    off_t at = ftello(f);
    if (at < 0 || fseeko(f, 0, SEEK_END) != 0) return UINT64_MAX;
    off_t end = ftello(f);
    if (fseeko(f, at, SEEK_SET) != 0 || end < at) return UINT64_MAX;
    return (uint64_t)(end - at);
}
