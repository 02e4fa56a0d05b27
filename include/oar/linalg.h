/* Dense linear algebra, as torch.linalg, through LAPACK (LAPACKE).
 *
 *     oar_tensor *x = oar_linalg_solve(A, b);      // A [n, n], b [n]: A x = b
 *     oar_tensor *w, *V;
 *     if (oar_linalg_eigh(S, "L", &w, &V)) fprintf(stderr, "%s\n", oar_last_error());
 *
 * Common rules:
 * - A is a batch of square matrices [..., n, n] (of matrices [..., m, n]
 *   for qr, svd and the functions built on them): every function works on
 *   each matrix of the leading (batch) dims, any strides.
 * - dtypes: f32, f64, c64 and c128. Every other dtype (bool, integers,
 *   f16, bf16) is refused, not promoted, with a message naming the
 *   function and the dtype: cast first. Real results of complex inputs
 *   (logabsdet, eigenvalues, singular values, norms) are f32 for c64 and f64 for c128.
 * - Results are new tensors following the pool rule, differentiable to
 *   any order (the gradient rules are written with ops). On bad input (a
 *   NULL argument, a non-square A, shapes that do not fit, a refused dtype)
 *   and on numerical failure (a singular matrix in solve/inv, a matrix
 *   that is not positive-definite in cholesky) a function returns NULL (or
 *   a non-zero status) with oar_last_error() naming it, the shapes or the
 *   batch element (counted over the flattened batch dims) and the LAPACK
 *   finding; a NULL input keeps the message already pending.
 * - Gradients need the matrices they invert to be invertible; they are
 *   not finite at singular points (det's gradient at a singular matrix is
 *   not finite here, where PyTorch computes it through an SVD). */
#ifndef OAR_LINALG_H
#define OAR_LINALG_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X with A X = B (torch.linalg.solve), by LU with partial pivoting
 * (getrf, getrs). A [..., n, n]; B [..., n, k], or a vector [..., n] when B
 * is 1-D or shaped A.shape[:-1] (the result then drops the k dim, as in
 * PyTorch). Batch dims broadcast; the dtype is A's and B's promoted.
 * A singular matrix is an error naming the batch element and the zero
 * pivot. Gradients: gB = A^-H gX, gA = -gB X^H. */
OAR_API oar_tensor *oar_linalg_solve(oar_tensor *A, oar_tensor *B);

/* A^-1 (torch.linalg.inv): oar_linalg_solve(A, I), so its errors (a
 * singular matrix, with the batch element) and gradients are solve's. */
OAR_API oar_tensor *oar_linalg_inv(oar_tensor *A);

/* det(A) [...] (torch.linalg.det), of A's dtype: sign * exp(logabsdet) of
 * oar_linalg_slogdet, whose gradient it takes (g det A^-H for real A); 0
 * for a singular A. */
OAR_API oar_tensor *oar_linalg_det(oar_tensor *A);

/* sign and log|det(A)| (torch.linalg.slogdet), each [...] (A's batch
 * dims), from the LU factorization (getrf). sign has A's dtype: +-1 (0 for
 * a singular matrix) for real A, det / |det| (0 when singular) for complex
 * A; logabsdet is real (-inf for a singular matrix; not an error). Either
 * output pointer may be NULL (that result is dropped), not both. Returns 0,
 * or a status with both outputs NULL. Gradients: logabsdet's is A^-H; a
 * real sign is piecewise constant (zero gradient), a complex sign's is
 * PyTorch's (-i Im(conj(g_sign) sign) A^-H). */
OAR_API int oar_linalg_slogdet(oar_tensor *A, oar_tensor **sign, oar_tensor **logabsdet);

/* L lower-triangular with A = L L^H (torch.linalg.cholesky); upper: U =
 * L^H with A = U^H U. Reads only the lower triangle of A (potrf), as
 * PyTorch. A that is not Hermitian positive-definite is an error naming
 * the batch element and the order of the leading minor that is not
 * positive-definite. Gradient: PyTorch's, L^-H Phi(L^H gL) L^-1
 * symmetrized (Phi: the lower triangle with the diagonal halved). */
OAR_API oar_tensor *oar_linalg_cholesky(oar_tensor *A, bool upper);

/* Eigenvalues w [..., n] (ascending, real dtype) and eigenvectors V
 * [..., n, n] (column j for w[j]; orthonormal) of a Hermitian A, A = V
 * diag(w) V^H (torch.linalg.eigh; syevd/heevd). uplo "L" (or NULL) reads
 * the lower triangle of A, "U" the upper, as torch's UPLO. Either output
 * pointer may be NULL, not both. Returns 0, or a status with the outputs
 * NULL (LAPACK failing to converge names the batch element).
 * Eigenvectors are unique only up to sign (real) or phase (complex): a
 * loss that depends on them should not depend on that choice. Gradient:
 * gA = V (diag(gw) + F o skew(V^H gV)) V^H with F_ij = 1/(w_j - w_i) off
 * the diagonal (PyTorch's rule): as PyTorch documents, it is inf/nan when
 * eigenvalues repeat (or nearly so) and gV is given. */
OAR_API int oar_linalg_eigh(oar_tensor *A, const char *uplo, oar_tensor **w, oar_tensor **V);

/* A = Q R (torch.linalg.qr; Householder: geqrf, then orgqr/ungqr), for any
 * A [..., m, n], k = min(m, n). mode "reduced" (or NULL): Q [..., m, k]
 * with orthonormal columns, R [..., k, n] upper-triangular; "complete": Q
 * [..., m, m] unitary, R [..., m, n]; "r": R only, as "reduced" (Q must be
 * NULL or is set to NULL; unlike PyTorch, R's gradient is available, Q
 * being computed anyway). R's diagonal is real (LAPACK's convention, not
 * made positive: PyTorch gives the same). Either output pointer may be
 * NULL, not both. Returns 0, or a status with the outputs NULL (a bad mode
 * is named). Gradient: PyTorch's, (gQ + Q copyltu(M)) R^-H with M = R gR^H
 * - gQ^H Q for m >= n, the split A = [X | Y] for m < n; not finite when R
 * is singular (A of lower rank than min(m, n)); refused (an error from the
 * backward) for mode "complete" with m > n, whose extra Q columns are not
 * unique. */
OAR_API int oar_linalg_qr(oar_tensor *A, const char *mode, oar_tensor **Q, oar_tensor **R);

/* A = U diag(S) Vh (torch.linalg.svd; divide and conquer: gesdd) for any A
 * [..., m, n], k = min(m, n): S [..., k] descending, real dtype; U [...,
 * m, k] and Vh [..., k, n] (full_matrices: U [..., m, m], Vh [..., n, n]),
 * orthonormal columns / rows. Any output pointer may be NULL, not all.
 * Returns 0, or a status with the outputs NULL (no convergence, or a nan
 * input, names the batch element). Singular vectors are unique only up to
 * sign (real) or phase (complex), the same one for U[:, j] and Vh[j, :]: a
 * loss must not depend on that choice (U diag(f(S)) Vh or |U|^2 do; U
 * alone does not). The gradient assumes it and does not check (PyTorch
 * raises for complex inputs when it can tell). Gradient: PyTorch's
 * svd_backward, F_ij = 1/(s_j^2 - s_i^2) off the diagonal: inf/nan at
 * repeated or zero singular values once U or Vh is used (S alone is fine:
 * gA = U diag(gS) Vh); with full_matrices the columns of U and rows of Vh
 * past k get no gradient (they are not unique), as in PyTorch. */
OAR_API int oar_linalg_svd(oar_tensor *A, bool full_matrices, oar_tensor **U, oar_tensor **S,
                           oar_tensor **Vh);

/* The singular values S [..., k] of A [..., m, n], descending, real dtype
 * (torch.linalg.svdvals): oar_linalg_svd's S (U and Vh are computed too,
 * for the gradient U diag(gS) Vh, which is finite everywhere). */
OAR_API oar_tensor *oar_linalg_svdvals(oar_tensor *A);

/* A matrix norm [...] of A [..., m, n] (torch.linalg.matrix_norm), real
 * dtype; keepdim keeps the two matrix dims as 1. ord (NULL: "fro"):
 * "fro" sqrt(sum |a_ij|^2); "nuc" the sum of the singular values; "2" /
 * "-2" the largest / smallest singular value; "1" / "-1" the largest /
 * smallest column sum of |A|; "inf" / "-inf" the largest / smallest row
 * sum. Any other ord is an error listing these. Gradients: those of the ops
 * it is built from (svdvals for "nuc" and +-2; at ties, amax/amin's). */
OAR_API oar_tensor *oar_linalg_matrix_norm(oar_tensor *A, const char *ord, bool keepdim);

/* The pseudo-inverse [..., n, m] of A [..., m, n] (torch.linalg.pinv with
 * its default tolerance): V diag(S+) U^H from oar_linalg_svd, S+ = 1/s for
 * s > max(m, n) eps s_max (eps of A's real dtype), 0 for the rest. The
 * gradient is svd's: finite when A has full rank and distinct singular
 * values (as PyTorch's through its SVD). */
OAR_API oar_tensor *oar_linalg_pinv(oar_tensor *A);

/* The least-squares solution X of min ||A X - B|| (the solution of
 * torch.linalg.lstsq), computed as pinv(A) B: the minimum-norm one when A
 * is rank-deficient, with pinv's cutoff (PyTorch's default CPU driver,
 * gelsy, cuts at the same relative max(m, n) eps). A [..., m, n]; B [...,
 * m, k], or a vector [..., m] when 1-D or shaped A.shape[:-1] (X then
 * drops the k dim). Batch dims broadcast; the dtype is A's and B's
 * promoted. Gradients: pinv's and matmul's. Residuals, rank and singular
 * values (lstsq's other results) are not returned. */
OAR_API oar_tensor *oar_linalg_lstsq(oar_tensor *A, oar_tensor *B);

/* exp(A) of A [..., n, n] (torch.linalg.matrix_exp): scaling and squaring
 * with the [13/13] Pade approximant (Higham 2005), r = (V - U)^-1 (V + U)
 * from matmul and oar_linalg_solve, squared s times, s = ceil(log2(|A|_1 /
 * 5.37)) from the largest 1-norm of the batch (read from A's values, so
 * not inside a traced graph, as PyTorch picks its degree from the norm).
 * Differentiable, to any order, through the ops it is built from: the
 * gradient is the approximant's, within rounding of exp's. */
OAR_API oar_tensor *oar_linalg_matrix_exp(oar_tensor *A);

#ifdef __cplusplus
}
#endif
#endif
