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

/* A matmul as one cuBLAS strided-batched GEMM (cublasGemmStridedBatchedEx),
 * in row-major terms: out[b] (n x m, dense, ld m, out[b] at b * n * m) =
 * A[b] (n x k) B[b] (k x m), A[b] at b * sa, B[b] at b * sb. */
typedef struct {
    int64_t n, m, k, batch;
    bool ta, tb;      /* the operand's rows are its unit-stride dim (cuBLAS op T) */
    int64_t lda, ldb; /* leading dimensions, as oar_cuda_gemm_layout gives */
    int64_t sa, sb;   /* batch strides in elements; 0: one matrix for every batch */
} oar_cuda_gemm_plan;

/* The single stride, in elements, that steps through the batch dims
 * (shape[0..nb), strides st) in row-major order, or -1 when none does:
 * dims of extent 1 are ignored, and each other dim's stride must be the
 * next such dim's stride times that dim's extent (all 0 for a broadcast
 * operand). A negative stride is refused. */
static inline int64_t oar_cuda_gemm_batch_stride(int nb, const int64_t *shape, const int64_t *st) {
    int64_t step = -1, inner_extent = 1; /* step: the innermost non-1 dim's stride */
    for (int i = nb - 1; i >= 0; i--) {
        if (shape[i] == 1) continue;
        if (st[i] < 0) return -1;
        if (step < 0) step = st[i];
        else if (st[i] != step * inner_extent) return -1;
        inner_extent *= shape[i];
    }
    return step < 0 ? 0 : step;
}

/* Plans out = a @ b (oar's matmul: a [..., n, k] or [k], b [..., k, m] or
 * [k], batch dims broadcast, out [batch..., n (unless a is 1-D), m (unless b
 * is 1-D)]) as one strided-batched GEMM that reads only the elements the
 * views cover and writes a dense output; false when it cannot (an operand
 * cuBLAS cannot read in place, batch dims that do not collapse to one
 * stride, an output that is not dense, a size past INT_MAX, shapes that do
 * not match). Ranks are at most 8. */
static inline bool oar_cuda_gemm_plan_make(int nda, const int64_t *sha, const int64_t *sta, int ndb,
                                           const int64_t *shb, const int64_t *stb, int ndo,
                                           const int64_t *sho, const int64_t *sto, oar_cuda_gemm_plan *p) {
    if (nda < 1 || ndb < 1 || nda > 8 || ndb > 8 || ndo < 0 || ndo > 8) return false;
    bool a1 = nda == 1, b1 = ndb == 1;
    int64_t mat_a[2] = {a1 ? 1 : sha[nda - 2], sha[nda - 1]}, st_a[2] = {a1 ? 0 : sta[nda - 2], sta[nda - 1]};
    int64_t mat_b[2] = {b1 ? shb[0] : shb[ndb - 2], b1 ? 1 : shb[ndb - 1]};
    int64_t st_b[2] = {b1 ? stb[0] : stb[ndb - 2], b1 ? 0 : stb[ndb - 1]};
    if (mat_a[1] != mat_b[0]) return false;
    int nb = ndo - (a1 ? 0 : 1) - (b1 ? 0 : 1);
    if (nb < 0 || nb < nda - 2 || nb < ndb - 2) return false;
    if ((!a1 && sho[nb] != mat_a[0]) || (!b1 && sho[ndo - 1] != mat_b[1])) return false;
    int64_t bsa[8], bsb[8], batch = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - (nda - 2)), ib = i - (nb - (ndb - 2));
        if (!a1 && ia >= 0 && sha[ia] != 1 && sha[ia] != sho[i]) return false;
        if (!b1 && ib >= 0 && shb[ib] != 1 && shb[ib] != sho[i]) return false;
        bsa[i] = !a1 && ia >= 0 && sha[ia] != 1 ? sta[ia] : 0;
        bsb[i] = !b1 && ib >= 0 && shb[ib] != 1 ? stb[ib] : 0;
        if (sho[i] < 0) return false;
        batch *= sho[i];
    }
    p->n = mat_a[0];
    p->k = mat_a[1];
    p->m = mat_b[1];
    p->batch = batch;
    p->sa = oar_cuda_gemm_batch_stride(nb, sho, bsa);
    p->sb = oar_cuda_gemm_batch_stride(nb, sho, bsb);
    if (p->sa < 0 || p->sb < 0 || batch > INT_MAX || p->n > INT_MAX || p->m > INT_MAX || p->k > INT_MAX)
        return false;
    if (!oar_cuda_gemm_layout(mat_a, st_a, &p->ta, &p->lda) || !oar_cuda_gemm_layout(mat_b, st_b, &p->tb, &p->ldb))
        return false;
    /* the output: dense row-major (every dim of extent > 1 at the stride
     * of a contiguous tensor) */
    int64_t want = 1;
    for (int i = ndo - 1; i >= 0; i--) {
        if (sho[i] != 1 && sto[i] != want) return false;
        want *= sho[i];
    }
    return true;
}

/* The same plan for operands alone (supports_op is asked before oar makes
 * the output): the output is the dense tensor oar will allocate, of the
 * broadcast batch shape. */
static inline bool oar_cuda_gemm_plan_inputs(int nda, const int64_t *sha, const int64_t *sta, int ndb,
                                             const int64_t *shb, const int64_t *stb, oar_cuda_gemm_plan *p) {
    if (nda < 1 || ndb < 1 || nda > 8 || ndb > 8) return false;
    int ba = nda >= 2 ? nda - 2 : 0, bb = ndb >= 2 ? ndb - 2 : 0, nb = ba > bb ? ba : bb, ndo = 0;
    int64_t sho[10], sto[10];
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t ea = ia >= 0 ? sha[ia] : 1, eb = ib >= 0 ? shb[ib] : 1;
        if (ea != eb && ea != 1 && eb != 1) return false;
        sho[ndo++] = ea == 1 ? eb : ea;
    }
    if (nda >= 2) sho[ndo++] = sha[nda - 2];
    if (ndb >= 2) sho[ndo++] = shb[ndb - 1];
    if (ndo > 8) return false;
    int64_t want = 1;
    for (int i = ndo - 1; i >= 0; i--) {
        sto[i] = want;
        want *= sho[i] > 0 ? sho[i] : 1;
    }
    return oar_cuda_gemm_plan_make(nda, sha, sta, ndb, shb, stb, ndo, sho, sto, p);
}

#endif
