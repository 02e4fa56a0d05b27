/* Autocast (include/oar/amp.h): a per-thread stack of scopes and the op
 * table's precision policy. It lives with dispatch, like grad mode: dispatch
 * asks oari_autocast_targets which dtype each input of a call should have
 * and casts it with an ordinary (recorded, traced) cast op before the shape
 * rule runs. The graph pass "amp" (src/graph/passes/amp.c) asks the same
 * function, so eager and static runs cast alike. */
#include "op.h"

#include <oar/amp.h>
#include <oar/device.h>

#include <stdlib.h>
#include <string.h>

#define AUTOCAST_MAX_DEPTH 64

/* The scopes' dtypes (OAR_F32: a disabling scope), innermost last, and
 * the dtype their LOW ops compute in on the CPU (the scope's, or f32 when
 * the CPU lacks native dot products in it and the policy says so). */
static _Thread_local oar_dtype scope[AUTOCAST_MAX_DEPTH], scope_compute[AUTOCAST_MAX_DEPTH];
static _Thread_local int depth;
/* Backward passes suspend autocast (oari_autocast_suspend). */
static _Thread_local int suspended;
_Thread_local bool oari_autocast_active;

static void refresh(void) {
    oari_autocast_active = depth > 0 && !suspended && scope[depth - 1] != OAR_F32;
}

/* ---- a low dtype the CPU only emulates --------------------------------------- */

static int emulated_mode = OAR_AUTOCAST_EMULATED_DEFAULT; /* (process-wide; atomic) */
static int warned[OAR_DTYPE_COUNT];

int oar_autocast_set_emulated(oar_autocast_emulated mode) {
    if (mode != OAR_AUTOCAST_EMULATED_DEFAULT && mode != OAR_AUTOCAST_EMULATED_LOW &&
        mode != OAR_AUTOCAST_EMULATED_F32)
        return oari_error(OAR_ERR_INVALID, "autocast_set_emulated: mode %d is not DEFAULT (0), LOW (1) or F32 (2)",
                          (int)mode);
    __atomic_store_n(&emulated_mode, (int)mode, __ATOMIC_RELAXED);
    return 0;
}

/* The policy now: the one set by oar_autocast_set_emulated, else
 * OAR_AUTOCAST_EMULATED ("low" or "f32"); DEFAULT when neither says. *env
 * is the variable's value when it names no policy (for the warning). */
static int emulated_policy(const char **bad_env) {
    int m = __atomic_load_n(&emulated_mode, __ATOMIC_RELAXED);
    *bad_env = NULL;
    if (m != OAR_AUTOCAST_EMULATED_DEFAULT) return m;
    const char *v = getenv("OAR_AUTOCAST_EMULATED");
    if (!v) return OAR_AUTOCAST_EMULATED_DEFAULT;
    if (!strcmp(v, "low")) return OAR_AUTOCAST_EMULATED_LOW;
    if (!strcmp(v, "f32")) return OAR_AUTOCAST_EMULATED_F32;
    *bad_env = v;
    return OAR_AUTOCAST_EMULATED_DEFAULT;
}

/* The dtype a scope of low's LOW ops compute in on the CPU; warns once per
 * dtype (per process) when the CPU only emulates low and no policy was
 * chosen. */
static oar_dtype cpu_compute_dtype(oar_dtype low) {
    if (low == OAR_F32) return OAR_F32;
    int native = oar_device_native_dot(oar_device_cpu(), low);
    if (native != 0) return low; /* (a failed probe: as native, the behaviour before the probe existed) */
    const char *bad = NULL;
    int m = emulated_policy(&bad);
    if (m == OAR_AUTOCAST_EMULATED_F32) return OAR_F32;
    if (m == OAR_AUTOCAST_EMULATED_DEFAULT && !__atomic_exchange_n(&warned[low], 1, __ATOMIC_RELAXED)) {
        const char *n = low == OAR_BF16 ? "bf16" : "f16";
        oari_log(OAR_LOG_WARN, "autocast",
                 "this CPU has no native %s dot products (%s), so %s matmul and conv inside autocast scopes are "
                 "emulated and typically slower than f32. They run in %s anyway; set OAR_AUTOCAST_EMULATED=f32 "
                 "(or call oar_autocast_set_emulated) to compute them in f32 instead, or =low to keep %s "
                 "without this warning (docs/amp.md)%s%s%s",
                 n, low == OAR_BF16 ? "AVX512_BF16 or AMX-BF16 with oneDNN" : "oar's CPU kernels compute f16 in f32",
                 n, n, n, bad ? "; OAR_AUTOCAST_EMULATED=\"" : "", bad ? bad : "", bad ? "\" is neither" : "");
    }
    return low;
}

oar_dtype oar_autocast_compute_dtype(void) { return oari_autocast_active ? scope_compute[depth - 1] : OAR_F32; }

int oar_autocast_push(oar_dtype low) {
    if (low != OAR_BF16 && low != OAR_F16 && low != OAR_F32)
        return oari_error(OAR_ERR_INVALID, "autocast_push: dtype %s is not bf16, f16 or f32 (f32 "
                          "disables autocast inside the scope)",
                          (unsigned)low < OAR_DTYPE_COUNT ? oar_dtype_name(low) : "(invalid)");
    if (depth == AUTOCAST_MAX_DEPTH)
        return oari_error(OAR_ERR_STATE, "autocast_push: scopes nested more than %d deep (a missing "
                          "oar_autocast_pop?)", AUTOCAST_MAX_DEPTH);
    scope_compute[depth] = cpu_compute_dtype(low);
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
    /* LOW ops compute in the scope's CPU dtype; on a plugin device's
     * tensors in the scope's own (that device's kernels run them) */
    oar_dtype low = scope_compute[depth - 1];
    for (int i = 0; i < n_in && n_in <= OARI_MAX_IN; i++)
        if (in[i] && in[i]->storage && in[i]->storage->device != oari_device_cpu()) low = scope[depth - 1];
    if (n_in < 0 || n_in > OARI_MAX_IN || !oari_autocast_targets(op, low, n_in, in, want))
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
