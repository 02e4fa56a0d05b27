/* How cuBLAS can read a row-major 2-D operand in place, kept apart from
 * the CUDA code so a CPU-only test checks it (tests/devices/
 * test_cuda_gemm_layout.c): cuBLAS reads an operand as a column-major
 * matrix with one unit-stride dim and a leading dimension ld, touching
 * every element up to (rows - 1) * ld + cols. Only a layout whose elements
 * lie at distinct places, at least that far apart, is safe: an expanded
 * (stride-0) or overlapping operand would make cuBLAS read past the
 * buffer, so it is refused (supports_op says no and oar runs the matmul on
 * the CPU). */
#ifndef OAR_CUDA_GEMM_LAYOUT_H
#define OAR_CUDA_GEMM_LAYOUT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

/* For a [rows, cols] operand with strides (s0, s1), in elements: true and
 * *transposed (its rows are the unit-stride dim: cuBLAS op T) and *ld when
 * cuBLAS can read it in place, false otherwise. A dim of extent 1 may have
 * any stride. */
static inline bool oar_cuda_gemm_layout(const int64_t shape[2], const int64_t strides[2], bool *transposed,
                                        int64_t *ld) {
    int64_t rows = shape[0], cols = shape[1], s0 = strides[0], s1 = strides[1];
    if (rows < 0 || cols < 0 || rows > INT_MAX || cols > INT_MAX) return false;
    /* row-major: elements of a row adjacent, rows ld >= cols apart */
    if (s1 == 1 || cols <= 1) {
        int64_t need = cols > 1 ? cols : 1;
        if (rows <= 1 || s0 >= need) {
            *transposed = false;
            *ld = rows <= 1 ? need : s0;
            return *ld <= INT_MAX;
        }
    }
    /* column-major: elements of a column adjacent, columns ld >= rows apart */
    if (s0 == 1 || rows <= 1) {
        int64_t need = rows > 1 ? rows : 1;
        if (cols <= 1 || s1 >= need) {
            *transposed = true;
            *ld = cols <= 1 ? need : s1;
            return *ld <= INT_MAX;
        }
    }
    return false;
}

/* Whether an output [rows, cols] with these strides is the dense row-major
 * matrix cuBLAS writes (ld = cols). */
static inline bool oar_cuda_gemm_out_ok(const int64_t shape[2], const int64_t strides[2]) {
    return (shape[1] <= 1 || strides[1] == 1) && (shape[0] <= 1 || strides[0] == shape[1]);
}

#endif
