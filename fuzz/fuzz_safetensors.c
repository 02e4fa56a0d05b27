/* libFuzzer harness for the safetensors reader: every input is parsed from
 * memory; a file that loads must hold tensors whose bytes can all be read
 * (ASan checks the reads) and must survive a save/load round trip with the
 * same names, dtypes, shapes and bytes. Module checkpoints and optimizer
 * state read through the same reader (fuzz_optim for the latter).
 *
 *     make fuzz                        (all harnesses; docs/fuzzing.md)
 *     ./build-fuzz/fuzz_safetensors -max_total_time=300 build-fuzz/corpus/fuzz_safetensors fuzz/corpus/fuzz_safetensors */
#include "fuzz_util.h"

static size_t nbytes(const oar_tensor *t) {
    return (size_t)oar_tensor_numel(t) * oar_dtype_size(oar_tensor_dtype(t));
}

static int fuzz_one(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_tensor_dict *d = oar_safetensors_load_memory(data, size, "fuzz");
    fuzz_note("fuzz_safetensors", d != NULL);
    if (!d) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_safetensors", "a failed load left no message");
        return 0;
    }
    int n = oar_tensor_dict_size(d);
    fuzz_check(n >= 0, "fuzz_safetensors", "negative size");
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    oar_tensor **ts = malloc((size_t)(n ? n : 1) * sizeof *ts);
    for (int i = 0; i < n; i++) {
        names[i] = oar_tensor_dict_name(d, i);
        ts[i] = oar_tensor_dict_tensor(d, i);
        fuzz_check(names[i] && ts[i], "fuzz_safetensors", "a NULL entry");
        size_t b = nbytes(ts[i]);
        unsigned char *buf = malloc(b ? b : 1);
        fuzz_check(oar_tensor_to_host(ts[i], buf, b) == 0, "fuzz_safetensors", "tensor data unreadable");
        free(buf);
    }
    /* round trip through a file */
    char path[200];
    snprintf(path, sizeof path, "%s/rt.safetensors", fuzz_dir());
    if (oar_safetensors_save(path, n, names, ts) == 0) {
        oar_tensor_dict *e = oar_safetensors_load(path);
        fuzz_check(e && oar_tensor_dict_size(e) == n, "fuzz_safetensors", "round trip lost tensors");
        for (int i = 0; i < n; i++) {
            oar_tensor *a = ts[i], *b = oar_tensor_dict_get(e, names[i]);
            fuzz_check(b && oar_tensor_dtype(a) == oar_tensor_dtype(b) && oar_tensor_ndim(a) == oar_tensor_ndim(b) &&
                           nbytes(a) == nbytes(b),
                       "fuzz_safetensors", "round trip changed a tensor");
            size_t k = nbytes(a);
            unsigned char *x = malloc(k ? k : 1), *y = malloc(k ? k : 1);
            fuzz_check(!oar_tensor_to_host(a, x, k) && !oar_tensor_to_host(b, y, k) && !memcmp(x, y, k),
                       "fuzz_safetensors", "round trip changed bytes");
            free(x);
            free(y);
        }
        oar_tensor_dict_free(e);
    }
    free(names);
    free(ts);
    oar_tensor_dict_free(d);
    return 0;
}

FUZZ_TARGET(fuzz_one)
