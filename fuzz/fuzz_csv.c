/* libFuzzer harness for the CSV reader (src/data/csv.c): the first byte
 * picks the options (delimiter, header row, dtype), the rest is the file.
 * One that loads must be a [rows, cols] tensor of the dtype asked for; one
 * that does not must say why.
 *
 *     ./build-fuzz/fuzz_csv -max_total_time=300 build-fuzz/corpus/fuzz_csv fuzz/corpus/fuzz_csv */
#include "fuzz_util.h"

#include <oar/data.h>

static int fuzz_one(const uint8_t *data, size_t size) {
    if (!size) return 0;
    static const char delims[4] = {',', ';', '\t', ' '};
    oar_csv_options o = {.delimiter = delims[data[0] & 3], .header = (data[0] >> 2) & 1,
                         .dtype = (data[0] >> 3) & 1 ? OAR_F64 : OAR_F32};
    oar_clear_error();
    oar_pool *pool = oar_pool_push();
    oar_tensor *t = oar_csv_load(fuzz_file(data + 1, size - 1), &o);
    fuzz_note("fuzz_csv", t != NULL);
    if (!t) fuzz_check(oar_last_error()[0] != 0, "fuzz_csv", "a failed load left no message");
    else fuzz_check(oar_tensor_ndim(t) == 2 && oar_tensor_dtype(t) == o.dtype && oar_tensor_numel(t) > 0, "fuzz_csv",
                    "not a [rows, cols] tensor of the dtype asked for");
    oar_pool_pop(pool);
    return 0;
}

FUZZ_TARGET(fuzz_one)
