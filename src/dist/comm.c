/* Collectives on local CPU tensors over one mesh dim, as MPI calls on the
 * mesh's communicator for that dim. A collective along a tensor dim moves
 * that dim to the front so each rank's part is one contiguous block. */
#include "dist.h"

#include <limits.h>
#include <string.h>

static MPI_Datatype mpi_type(oar_dtype d) {
    switch (d) {
    case OAR_BOOL: return MPI_C_BOOL;
    case OAR_U8: return MPI_UINT8_T;
    case OAR_I32: return MPI_INT32_T;
    case OAR_I64: return MPI_INT64_T;
    case OAR_F32: return MPI_FLOAT;
    case OAR_F64: return MPI_DOUBLE;
    case OAR_C64: return MPI_C_FLOAT_COMPLEX;
    case OAR_C128: return MPI_C_DOUBLE_COMPLEX;
    default: return MPI_DATATYPE_NULL;
    }
}

static bool is_complex(oar_dtype d) { return d == OAR_C64 || d == OAR_C128; }
static bool is_half(oar_dtype d) { return d == OAR_F16 || d == OAR_BF16; }
static bool is_int(oar_dtype d) { return d == OAR_BOOL || d == OAR_U8 || d == OAR_I32 || d == OAR_I64; }

/* The MPI op for a reduction on dtype d, or MPI_OP_NULL with the error set. */
static MPI_Op mpi_op(const char *what, oar_reduce_op op, oar_dtype d) {
    if (d == OAR_BOOL) {
        if (op == OAR_REDUCE_MAX) return MPI_LOR;
        if (op == OAR_REDUCE_MIN) return MPI_LAND;
    } else if ((op == OAR_REDUCE_MAX || op == OAR_REDUCE_MIN) && is_complex(d)) {
        /* falls through to the error: complex numbers have no order */
    } else if (op == OAR_REDUCE_AVG && is_int(d)) {
        /* falls through: an average of integers is not an integer */
    } else {
        switch (op) {
        case OAR_REDUCE_SUM: case OAR_REDUCE_AVG: return MPI_SUM;
        case OAR_REDUCE_MAX: return MPI_MAX;
        case OAR_REDUCE_MIN: return MPI_MIN;
        case OAR_REDUCE_PROD: return MPI_PROD;
        }
    }
    static const char *const names[] = {"sum", "avg", "max", "min", "prod"};
    oari_error(OAR_ERR_INVALID, "%s: reduction %s is not defined for dtype %s", what,
               (unsigned)op < 5 ? names[op] : "?", oar_dtype_name(d));
    return MPI_OP_NULL;
}

static int check_local(const char *what, oar_tensor *x, oar_mesh *m, int d) {
    if (!x || !m || d < 0 || d >= m->ndim)
        return oari_error(OAR_ERR_INVALID, "%s: bad tensor or mesh dim", what);
    if (m->comm[d] == MPI_COMM_NULL)
        return oari_error(OAR_ERR_STATE, "%s: this rank is not in the mesh", what);
    if (x->storage && x->storage->device != oari_device_cpu())
        return oari_error(OAR_ERR_UNSUPPORTED, "%s: collectives run on CPU tensors only for now (got %s)",
                          what, x->storage->device->name);
    return 0;
}

static int mpi_fail(const char *what, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return oari_error(OAR_ERR_STATE, "%s: MPI error: %s", what, msg);
}

/* x with dim `dim` moved to the front, contiguous, retained by the caller's pool. */
static oar_tensor *dim_to_front(oar_tensor *x, int dim, int64_t *perm) {
    for (int i = 0, k = 1; i < x->ndim; i++) {
        if (i == dim) perm[0] = i;
        else perm[k++] = i;
    }
    return oar_contiguous(oar_permute(x, perm));
}

static oar_tensor *front_to_dim(oar_tensor *y, const int64_t *perm, int ndim) {
    int64_t inv[OAR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) inv[perm[i]] = i;
    return oar_contiguous(oar_permute(y, inv));
}

/* Runs body with half-precision inputs converted to f32 and back. */
static oar_tensor *widen(oar_tensor *x) { return is_half(x->dtype) ? oar_cast(x, OAR_F32) : x; }

oar_tensor *oari_all_reduce(oar_tensor *x, oar_reduce_op op, oar_mesh *m, int d) {
    if (check_local("all_reduce", x, m, d)) return NULL;
    oar_pool *pool = oar_pool_push();
    oar_tensor *w = widen(x);
    oar_tensor *out = w ? oar_clone(w) : NULL;
    MPI_Op mop = out ? mpi_op("all_reduce", op, out->dtype) : MPI_OP_NULL;
    if (mop == MPI_OP_NULL) out = NULL;
    if (out && out->numel > INT_MAX) {
        oari_error(OAR_ERR_UNSUPPORTED, "all_reduce: %lld elements exceed one MPI call", (long long)out->numel);
        out = NULL;
    }
    if (out) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, oar_tensor_data(out), (int)out->numel,
                               mpi_type(out->dtype), mop, m->comm[d]);
        if (rc != MPI_SUCCESS) mpi_fail("all_reduce", rc), out = NULL;
    }
    if (out && op == OAR_REDUCE_AVG) out = oar_div_scalar(out, (double)m->shape[d]);
    if (out && out->dtype != x->dtype) out = oar_cast(out, x->dtype);
    return oari_pop_owned(pool, out);
}

/* Gathers each rank's int64 v along mesh dim d into all[] (m->shape[d] entries). */
static int gather_i64(int64_t v, int64_t *all, oar_mesh *m, int d) {
    int rc = MPI_Allgather(&v, 1, MPI_INT64_T, all, 1, MPI_INT64_T, m->comm[d]);
    return rc == MPI_SUCCESS ? 0 : mpi_fail("all_gather", rc);
}

int oari_sum_i64(int64_t *v, oar_mesh *m, int d) {
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT64_T, MPI_SUM, m->comm[d]);
    return rc == MPI_SUCCESS ? 0 : mpi_fail("dtensor", rc);
}

oar_tensor *oari_all_gather(oar_tensor *x, int dim, oar_mesh *m, int d) {
    if (check_local("all_gather", x, m, d)) return NULL;
    if (dim < 0 || dim >= x->ndim)
        return oari_error(OAR_ERR_INVALID, "all_gather: dim %d of a %d-d tensor", dim, x->ndim), NULL;
    int n = (int)m->shape[d];
    int64_t sizes[64];
    if (n > 64) return oari_error(OAR_ERR_UNSUPPORTED, "all_gather: mesh dim of %d ranks (at most 64)", n), NULL;
    oar_pool *pool = oar_pool_push();
    int64_t perm[OAR_MAX_DIMS];
    oar_tensor *f = dim_to_front(x, dim, perm), *out = NULL;
    if (f && !gather_i64(f->shape[0], sizes, m, d)) {
        int64_t shape[OAR_MAX_DIMS], total = 0, inner = 1;
        for (int i = 1; i < f->ndim; i++) inner *= f->shape[i];
        for (int c = 0; c < n; c++) total += sizes[c];
        memcpy(shape, f->shape, sizeof(int64_t) * (size_t)f->ndim);
        shape[0] = total;
        int64_t es = (int64_t)oar_dtype_size(x->dtype);
        int counts[64], displs[64];
        bool fits = total * inner * es <= INT_MAX;
        for (int c = 0, off = 0; c < n && fits; c++) {
            counts[c] = (int)(sizes[c] * inner * es);
            displs[c] = off;
            off += counts[c];
        }
        oar_tensor *y = fits ? oari_pool_adopt(oari_tensor_empty(NULL, x->dtype, f->ndim, shape)) : NULL;
        if (!fits) oari_error(OAR_ERR_UNSUPPORTED, "all_gather: result exceeds one MPI call (2 GiB)");
        if (y) {
            int rc = MPI_Allgatherv(oar_tensor_data(f), (int)(f->numel * es), MPI_BYTE,
                                    oar_tensor_data(y), counts, displs, MPI_BYTE, m->comm[d]);
            if (rc != MPI_SUCCESS) mpi_fail("all_gather", rc);
            else out = front_to_dim(y, perm, x->ndim);
        }
    }
    return oari_pop_owned(pool, out);
}

oar_tensor *oari_reduce_scatter(oar_tensor *x, int dim, oar_reduce_op op, oar_mesh *m, int d) {
    if (check_local("reduce_scatter", x, m, d)) return NULL;
    if (dim < 0 || dim >= x->ndim)
        return oari_error(OAR_ERR_INVALID, "reduce_scatter: dim %d of a %d-d tensor", dim, x->ndim), NULL;
    int n = (int)m->shape[d];
    if (n > 64) return oari_error(OAR_ERR_UNSUPPORTED, "reduce_scatter: mesh dim of %d ranks (at most 64)", n), NULL;
    oar_pool *pool = oar_pool_push();
    int64_t perm[OAR_MAX_DIMS];
    oar_tensor *w = widen(x);
    oar_tensor *f = w ? dim_to_front(w, dim, perm) : NULL, *out = NULL;
    MPI_Op mop = f ? mpi_op("reduce_scatter", op, f->dtype) : MPI_OP_NULL;
    if (mop != MPI_OP_NULL) {
        int64_t inner = 1, start, len, shape[OAR_MAX_DIMS];
        for (int i = 1; i < f->ndim; i++) inner *= f->shape[i];
        int counts[64];
        bool fits = f->numel <= INT_MAX;
        for (int c = 0; c < n; c++) {
            oari_chunk(f->shape[0], n, c, &start, &len);
            counts[c] = (int)(len * inner);
        }
        oari_chunk(f->shape[0], n, m->coord[d], &start, &len);
        memcpy(shape, f->shape, sizeof(int64_t) * (size_t)f->ndim);
        shape[0] = len;
        oar_tensor *y = fits ? oari_pool_adopt(oari_tensor_empty(NULL, f->dtype, f->ndim, shape)) : NULL;
        if (!fits) oari_error(OAR_ERR_UNSUPPORTED, "reduce_scatter: input exceeds one MPI call");
        if (y) {
            int rc = MPI_Reduce_scatter(oar_tensor_data(f), oar_tensor_data(y), counts,
                                        mpi_type(f->dtype), mop, m->comm[d]);
            if (rc != MPI_SUCCESS) mpi_fail("reduce_scatter", rc);
            else out = front_to_dim(y, perm, x->ndim);
        }
        if (out && op == OAR_REDUCE_AVG) out = oar_div_scalar(out, (double)n);
        if (out && out->dtype != x->dtype) out = oar_cast(out, x->dtype);
    }
    return oari_pop_owned(pool, out);
}
