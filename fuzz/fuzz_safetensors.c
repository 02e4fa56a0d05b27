/* libFuzzer harness for the safetensors reader: every input is parsed from
 * memory; a file that loads must hold tensors whose bytes can all be read
 * (ASan checks the reads) and must survive a save/load round trip with the
 * same names, dtypes, shapes and bytes.
 *
 *     cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DOAR_FUZZ=ON
 *     cmake --build build-fuzz --target fuzz_safetensors
 *     mkdir -p corpus && cp tests/io/*.safetensors corpus/
 *     ./build-fuzz/fuzz_safetensors -max_total_time=300 corpus
 *
 * The corpus is not committed. */
#include <oar/oar.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_safetensors: %s (%s)\n", what, oar_last_error());
        abort();
    }
}

static size_t nbytes(const oar_tensor *t) {
    return (size_t)oar_tensor_numel(t) * oar_dtype_size(oar_tensor_dtype(t));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oar_clear_error();
    oar_tensor_dict *d = oar_safetensors_load_memory(data, size, "fuzz");
    if (!d) {
        check(oar_last_error()[0] != 0, "a failed load left no message");
        return 0;
    }
    int n = oar_tensor_dict_size(d);
    check(n >= 0, "negative size");
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    oar_tensor **ts = malloc((size_t)(n ? n : 1) * sizeof *ts);
    for (int i = 0; i < n; i++) {
        names[i] = oar_tensor_dict_name(d, i);
        ts[i] = oar_tensor_dict_tensor(d, i);
        check(names[i] && ts[i], "a NULL entry");
        size_t b = nbytes(ts[i]);
        unsigned char *buf = malloc(b ? b : 1);
        check(oar_tensor_to_host(ts[i], buf, b) == 0, "tensor data unreadable");
        free(buf);
    }
    /* round trip through a file */
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_safetensors_%d.st", (int)getpid());
    if (oar_safetensors_save(path, n, names, ts) == 0) {
        oar_tensor_dict *e = oar_safetensors_load(path);
        check(e && oar_tensor_dict_size(e) == n, "round trip lost tensors");
        for (int i = 0; i < n; i++) {
            oar_tensor *a = ts[i], *b = oar_tensor_dict_get(e, names[i]);
            check(b && oar_tensor_dtype(a) == oar_tensor_dtype(b) &&
                      oar_tensor_ndim(a) == oar_tensor_ndim(b) && nbytes(a) == nbytes(b),
                  "round trip changed a tensor");
            size_t k = nbytes(a);
            unsigned char *x = malloc(k ? k : 1), *y = malloc(k ? k : 1);
            check(!oar_tensor_to_host(a, x, k) && !oar_tensor_to_host(b, y, k) &&
                      !memcmp(x, y, k),
                  "round trip changed bytes");
            free(x);
            free(y);
        }
        oar_tensor_dict_free(e);
        remove(path);
    }
    free(names);
    free(ts);
    oar_tensor_dict_free(d);
    return 0;
}
