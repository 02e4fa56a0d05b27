/* The operand layouts the cuda plugin hands to cuBLAS in place
 * (plugins/cuda/cuda_gemm_layout.h), checked on the CPU against a model of
 * cuBLAS's column-major addressing: a layout accepted must put every
 * element (i, j) where cuBLAS will read it (op N: j + i*ld, op T:
 * i + j*ld, in the column-major view of the row-major operand) and
 * cuBLAS must read nothing past the operand's last element. Expanded
 * (stride-0), overlapping and negative-stride operands must be refused:
 * cuBLAS would read past the buffer (issue 25). */
#include "test.h"

#include "../../plugins/cuda/cuda_gemm_layout.h"

/* The element offset cuBLAS reads for (i, j) of the layout it accepted. */
static int64_t cublas_offset(bool transposed, int64_t ld, int64_t i, int64_t j) {
    return transposed ? i + j * ld : j + i * ld;
}

/* Whether every element of [rows, cols] with strides (s0, s1) has an
 * offset of its own (no two elements alias) and all offsets are >= 0
 * (a negative stride is refused: cuBLAS has none). */
static bool distinct_elements(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
    if (rows <= 0 || cols <= 0) return true;
    if (rows == 1) s0 = 0; /* the stride of an extent-1 dim is never used */
    if (cols == 1) s1 = 0;
    int64_t span = (rows - 1) * (s0 < 0 ? -s0 : s0) + (cols - 1) * (s1 < 0 ? -s1 : s1) + 1;
    if (s0 < 0 || s1 < 0 || span > 1 << 16) return false;
    unsigned char *seen = calloc((size_t)span, 1);
    bool ok = seen != NULL;
    for (int64_t i = 0; i < rows && ok; i++)
        for (int64_t j = 0; j < cols && ok; j++) {
            int64_t off = i * s0 + j * s1;
            if (seen[off]) ok = false;
            seen[off] = 1;
        }
    free(seen);
    return ok;
}

/* Every small shape and stride pair: accepted layouts are addressed as
 * cuBLAS addresses them and read nothing past the last element; the usual
 * layouts are accepted. */
static void test_exhaustive(void) {
    int accepted = 0, refused_aliasing = 0;
    for (int64_t rows = 1; rows <= 5; rows++)
        for (int64_t cols = 1; cols <= 5; cols++)
            for (int64_t s0 = -2; s0 <= 12; s0++)
                for (int64_t s1 = -2; s1 <= 12; s1++) {
                    bool t;
                    int64_t ld = -1;
                    bool ok = oar_cuda_gemm_layout((int64_t[]){rows, cols}, (int64_t[]){s0, s1}, &t, &ld);
                    bool distinct = distinct_elements(rows, cols, s0, s1);
                    if (!distinct) {
                        if (ok) fprintf(stderr, "accepted aliasing [%lld, %lld] strides (%lld, %lld)\n",
                                        (long long)rows, (long long)cols, (long long)s0, (long long)s1);
                        CHECK(!ok);
                        refused_aliasing += !ok;
                        continue;
                    }
                    if (!ok) continue;
                    accepted++;
                    int64_t last = (rows - 1) * s0 + (cols - 1) * s1, furthest = 0;
                    bool same = ld >= 1;
                    for (int64_t i = 0; i < rows; i++)
                        for (int64_t j = 0; j < cols; j++) {
                            int64_t off = cublas_offset(t, ld, i, j);
                            same = same && off == i * s0 + j * s1;
                            if (off > furthest) furthest = off;
                        }
                    if (!same) fprintf(stderr, "[%lld, %lld] strides (%lld, %lld): cuBLAS reads elsewhere (ld %lld)\n",
                                       (long long)rows, (long long)cols, (long long)s0, (long long)s1, (long long)ld);
                    CHECK(same);
                    CHECK(furthest <= last);
                }
    CHECK(accepted > 100);
    CHECK(refused_aliasing > 100);
}

static void test_cases(void) {
    bool t;
    int64_t ld;
    /* contiguous [4, 6]: op N, ld 6 */
    CHECK(oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){6, 1}, &t, &ld) && !t && ld == 6);
    /* its transpose, a [6, 4] view with strides (1, 6): op T, ld 6 */
    CHECK(oar_cuda_gemm_layout((int64_t[]){6, 4}, (int64_t[]){1, 6}, &t, &ld) && t && ld == 6);
    /* a slice of columns of a [4, 10] matrix: ld 10 */
    CHECK(oar_cuda_gemm_layout((int64_t[]){4, 3}, (int64_t[]){10, 1}, &t, &ld) && !t && ld == 10);
    /* expanded rows (a [6] vector broadcast to [4, 6]) and columns */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){0, 1}, &t, &ld));
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){1, 0}, &t, &ld));
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 1}, (int64_t[]){0, 1}, &t, &ld));
    /* a scalar expanded to [3, 3] */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){3, 3}, (int64_t[]){0, 0}, &t, &ld));
    /* rows overlapping (ld smaller than a row) */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){3, 1}, &t, &ld));
    /* a dim of extent 1 takes any stride */
    CHECK(oar_cuda_gemm_layout((int64_t[]){1, 6}, (int64_t[]){0, 1}, &t, &ld) && !t && ld == 6);
    CHECK(oar_cuda_gemm_layout((int64_t[]){5, 1}, (int64_t[]){1, 0}, &t, &ld));
    /* too large for cuBLAS's int dims */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){(int64_t)INT_MAX + 1, 2}, (int64_t[]){2, 1}, &t, &ld));
    CHECK(!oar_cuda_gemm_layout((int64_t[]){2, 2}, (int64_t[]){(int64_t)INT_MAX + 1, 1}, &t, &ld));
    /* outputs: only the dense row-major matrix */
    CHECK(oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){6, 1}));
    CHECK(oar_cuda_gemm_out_ok((int64_t[]){1, 6}, (int64_t[]){99, 1}));
    CHECK(!oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){1, 4}));
    CHECK(!oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){10, 1}));
    CHECK(!oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){0, 1}));
}

int main(void) {
    RUN(test_cases);
    RUN(test_exhaustive);
    return test_summary();
}
