/* libFuzzer harness for the .npy reader (src/infer/npy.c): every input is
 * a file. One that loads must round-trip through oar_npy_save with the
 * same dtype, shape and bytes; one that does not must say why. Checked by
 * ASan and UBSan: no read past a buffer (the header parser), no
 * allocation of what a header claims before the bytes are there.
 *
 *     make fuzz                       (all harnesses; docs/fuzzing.md)
 *     ./build-fuzz/fuzz_npy -max_total_time=300 build-fuzz/corpus/fuzz_npy fuzz/corpus/fuzz_npy */
#include "fuzz_util.h"

#include <oar/infer.h>

static size_t nbytes(const oar_tensor *t) { return (size_t)oar_tensor_numel(t) * oar_dtype_size(oar_tensor_dtype(t)); }

static int fuzz_one(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_tensor *t = oar_npy_load(fuzz_file(data, size));
    fuzz_note("fuzz_npy", t != NULL);
    if (!t) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_npy", "a failed load left no message");
        return 0;
    }
    size_t n = nbytes(t);
    unsigned char *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
    fuzz_check(oar_tensor_to_host(t, a, n) == 0, "fuzz_npy", "tensor data unreadable");
    char path[200];
    snprintf(path, sizeof path, "%s/rt.npy", fuzz_dir());
    if (oar_npy_save(path, t) == 0) {
        oar_tensor *u = oar_npy_load(path);
        fuzz_check(u && oar_tensor_dtype(u) == oar_tensor_dtype(t) && oar_tensor_ndim(u) == oar_tensor_ndim(t) &&
                       nbytes(u) == n && !oar_tensor_to_host(u, b, n) && !memcmp(a, b, n),
                   "fuzz_npy", "the round trip changed the tensor");
        oar_tensor_release(u);
    }
    free(a);
    free(b);
    oar_tensor_release(t);
    return 0;
}

FUZZ_TARGET(fuzz_one)
