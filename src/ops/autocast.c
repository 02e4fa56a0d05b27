/* Autocast (include/oar/amp.h): a per-thread stack of scopes and the op
 * table's precision policy. It lives with dispatch, like grad mode: dispatch
 * asks oari_autocast_targets which dtype each input of a call should have
 * and casts it with an ordinary (recorded, traced) cast op before the shape
 * rule runs. The graph pass "amp" (src/graph/passes/amp.c) asks the same
 * function, so eager and static runs cast alike. */
#include "op.h"

#include <oar/amp.h>

#define AUTOCAST_MAX_DEPTH 64

/* The scopes' dtypes (OAR_F32: a disabling scope), innermost last. */
static _Thread_local oar_dtype scope[AUTOCAST_MAX_DEPTH];
static _Thread_local int depth;
/* Backward passes suspend autocast (oari_autocast_suspend). */
static _Thread_local int suspended;
_Thread_local bool oari_autocast_active;

static void refresh(void) {
    oari_autocast_active = depth > 0 && !suspended && scope[depth - 1] != OAR_F32;
}

int oar_autocast_push(oar_dtype low) {
    if (low != OAR_BF16 && low != OAR_F16 && low != OAR_F32)
        return oari_error(OAR_ERR_INVALID, "autocast_push: dtype %s is not bf16, f16 or f32 (f32 "
                          "disables autocast inside the scope)",
                          (unsigned)low < OAR_DTYPE_COUNT ? oar_dtype_name(low) : "(invalid)");
    if (depth == AUTOCAST_MAX_DEPTH)
        return oari_error(OAR_ERR_STATE, "autocast_push: scopes nested more than %d deep (a missing "
                          "oar_autocast_pop?)", AUTOCAST_MAX_DEPTH);
    scope[depth++] = low;
    refresh();
    return 0;
}

int oar_autocast_pop(void) {
    if (depth == 0) return oari_error(OAR_ERR_STATE, "autocast_pop: no autocast scope is open on this thread");
    depth--;
    refresh();
    return 0;
}

bool oar_autocast_enabled(void) { return oari_autocast_active; }

oar_dtype oar_autocast_dtype(void) { return oari_autocast_active ? scope[depth - 1] : OAR_F32; }

int oari_autocast_suspend(void) {
    suspended++;
    refresh();
    return 0;
}

void oari_autocast_resume(void) {
    if (suspended > 0) suspended--;
    refresh();
}

int oari_autocast_replay_begin(oar_dtype low, int *saved) {
    *saved = suspended;
    suspended = 0;
    int st = oar_autocast_push(low);
    if (st) suspended = *saved;
    refresh();
    return st;
}

void oari_autocast_replay_end(int saved) {
    if (depth > 0) depth--;
    suspended = saved;
    refresh();
}

/* The policy table (the lists of include/oar/amp.h); every op not named
 * here promotes. */
int oari_autocast_policy(oari_op op) {
    switch (op) {
    case OARI_OP_matmul:
    case OARI_OP_conv2d:
    case OARI_OP_conv3d:
    case OARI_OP_conv_transpose2d:
    case OARI_OP_conv_transpose3d:
        return OAR_AUTOCAST_LOW;
    case OARI_OP_softmax:
    case OARI_OP_log_softmax:
    case OARI_OP_layer_norm:
    case OARI_OP_group_norm:
    case OARI_OP_batch_norm:
    case OARI_OP_sum:
    case OARI_OP_prod:
    case OARI_OP_cumsum:
    case OARI_OP_cumprod:
    case OARI_OP_exp:
    case OARI_OP_exp2:
    case OARI_OP_expm1:
    case OARI_OP_log:
    case OARI_OP_log2:
    case OARI_OP_log1p:
    case OARI_OP_pow:
    case OARI_OP_reciprocal:
    case OARI_OP_rsqrt:
    case OARI_OP_softplus:
    case OARI_OP_tan:
    case OARI_OP_asin:
    case OARI_OP_acos:
    case OARI_OP_sinh:
    case OARI_OP_cosh:
    case OARI_OP_linalg_solve:
    case OARI_OP_linalg_slogdet:
    case OARI_OP_linalg_cholesky:
    case OARI_OP_linalg_eigh:
    case OARI_OP_linalg_qr:
    case OARI_OP_linalg_svd:
    case OARI_OP_fft_c2c:
    case OARI_OP_fft_r2c:
    case OARI_OP_fft_c2r:
    case OARI_OP_rnn_layer: /* no half kernels (OARI_F_NO_HALF) */
    case OARI_OP_lstm_layer:
        return OAR_AUTOCAST_F32;
    default:
        return OAR_AUTOCAST_PROMOTE;
    }
}

int oar_autocast_op_policy(const char *op_name) {
    if (!op_name) return oari_error(OAR_ERR_INVALID, "autocast_op_policy: op name is NULL");
    int op = oari_op_lookup(op_name);
    if (op < 0 || !oari_op_defs[op])
        return oari_error(OAR_ERR_INVALID, "autocast_op_policy: no op named \"%s\" (docs/ops.md lists "
                          "them)", op_name);
    return oari_autocast_policy((oari_op)op);
}

static bool is_mixed_float(oar_dtype d) { return d == OAR_F16 || d == OAR_BF16 || d == OAR_F32; }

bool oari_autocast_targets(oari_op op, oar_dtype low, int n_in, oar_tensor *const *in, oar_dtype *want) {
    const oari_op_def *def = (unsigned)op < OARI_OP_COUNT ? oari_op_defs[op] : NULL;
    bool any = false;
    for (int i = 0; i < n_in; i++) want[i] = in[i] ? in[i]->dtype : OAR_F32;
    if (!def || (def->flags & (OARI_F_INPLACE | OARI_F_VIEW)) || op == OARI_OP_cast) return false;
    int p = oari_autocast_policy(op);
    oar_dtype target = p == OAR_AUTOCAST_LOW ? low : OAR_F32;
    if (p == OAR_AUTOCAST_PROMOTE) {
        /* the widest of the dimensioned f16/bf16/f32 inputs, if they mix */
        oar_dtype first = OAR_DTYPE_COUNT;
        bool mixed = false;
        for (int i = 0; i < n_in; i++) {
            if (!in[i] || in[i]->ndim == 0 || !is_mixed_float(in[i]->dtype)) continue;
            if (first == OAR_DTYPE_COUNT) first = in[i]->dtype;
            mixed = mixed || in[i]->dtype != first;
        }
        if (!mixed) return false;
        target = OAR_F32; /* f16 with bf16 widens to f32 too */
    }
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || !is_mixed_float(in[i]->dtype) || in[i]->dtype == target) continue;
        if (p == OAR_AUTOCAST_F32 && in[i]->dtype == OAR_F32) continue;
        if (p == OAR_AUTOCAST_PROMOTE && in[i]->ndim == 0) continue;
        want[i] = target;
        any = true;
    }
    return any;
}

int oari_autocast_dispatch(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                           oar_tensor **out) {
    oar_dtype want[OARI_MAX_IN];
    if (n_in < 0 || n_in > OARI_MAX_IN || !oari_autocast_targets(op, scope[depth - 1], n_in, in, want))
        return oari_dispatch_run(op, n_in, in, attrs, out);
    oar_tensor *cin[OARI_MAX_IN] = {0};
    int st = 0;
    for (int i = 0; i < n_in; i++) cin[i] = in[i];
    for (int i = 0; i < n_in && !st; i++) {
        if (!in[i] || want[i] == in[i]->dtype) continue;
        oari_attrs ca = {.ni = 1, .i = {want[i]}};
        oar_tensor *r = NULL;
        if (!(st = oari_dispatch_run(OARI_OP_cast, 1, &in[i], &ca, &r))) cin[i] = r;
    }
    if (!st) st = oari_dispatch_run(op, n_in, cin, attrs, out);
    else
        for (int j = 0; j < oari_op_defs[op]->n_out; j++) out[j] = NULL;
    for (int i = 0; i < n_in; i++)
        if (cin[i] != in[i]) oar_tensor_release(cin[i]);
    return st;
}
