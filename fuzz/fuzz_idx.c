/* libFuzzer harness for the IDX reader (src/data/idx.c): every input is a
 * file (plain or gzip'd). One that loads must hold numel elements of a
 * dtype the format maps to; one that does not must say why. ASan checks
 * the reads; the load limit (fuzz_util.h) and the data read as it arrives
 * keep a header's claim from being allocated.
 *
 *     ./build-fuzz/fuzz_idx -max_total_time=300 build-fuzz/corpus/fuzz_idx fuzz/corpus/fuzz_idx */
#include "fuzz_util.h"

#include <oar/data.h>

static int fuzz_one(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_idx_load(fuzz_file(data, size));
    fuzz_note("fuzz_idx", t != NULL);
    if (!t) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_idx", "a failed load left no message");
    } else {
        oar_dtype dt = oar_tensor_dtype(t);
        fuzz_check(dt == OAR_U8 || dt == OAR_I32 || dt == OAR_F32 || dt == OAR_F64, "fuzz_idx", "unexpected dtype");
        size_t n = (size_t)oar_tensor_numel(t) * oar_dtype_size(dt);
        unsigned char *b = malloc(n ? n : 1);
        fuzz_check(oar_tensor_to_host(t, b, n) == 0, "fuzz_idx", "tensor data unreadable");
        free(b);
    }
    oar_pool_pop(pool);
    return 0;
}

FUZZ_TARGET(fuzz_one)
