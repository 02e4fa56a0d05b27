/* Dense linear algebra, as torch.linalg, through LAPACK (LAPACKE).
 *
 *     oar_tensor *x = oar_linalg_solve(A, b);      // A [n, n], b [n]: A x = b
 *     oar_tensor *w, *V;
 *     if (oar_linalg_eigh(S, "L", &w, &V)) fprintf(stderr, "%s\n", oar_last_error());
 *
 * Common rules:
 * - A is a batch of square matrices [..., n, n]: every function works on
 *   each matrix of the leading (batch) dims, any strides.
 * - dtypes: f32, f64, c64 and c128. Every other dtype (bool, integers,
 *   f16, bf16) is refused, not promoted, with a message naming the
 *   function and the dtype: cast first. Real results of complex inputs
 *   (logabsdet, eigenvalues) are f32 for c64 and f64 for c128.
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

#ifdef __cplusplus
}
#endif
#endif
