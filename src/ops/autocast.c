/* Autocast (include/oar/amp.h): a per-thread stack of scopes and the op
 * table's precision policy. It lives with dispatch, like grad mode: dispatch
 * asks oari_autocast_targets which dtype each input of a call should have
 * and casts it with an ordinary (recorded, traced) cast op before the shape
 * rule runs. The graph pass "amp" (src/graph/passes/amp.c) asks the same
 * function, so eager and static runs cast alike. */
#include "op.h"

#include <oar/amp.h>
#include <oar/device.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AUTOCAST_MAX_DEPTH 64

/* The scopes' dtypes (OAR_F32: a disabling scope), innermost last, and
 * the dtype their LOW ops compute in on the CPU (the scope's, or f32 when
 * the CPU lacks native dot products in it and the policy says so). */
static _Thread_local oar_dtype scope[AUTOCAST_MAX_DEPTH], scope_compute[AUTOCAST_MAX_DEPTH];
/* Each scope's emulated-dtype policy, read when it opened, and the dtype
 * its LOW ops compute in on each plugin device (by device id), 1 + the
 * dtype once asked, 0 before: a device is asked on the first LOW op on
 * its tensors in the scope, so the hot path calls no plugin. A push
 * clears the new level; popping back finds the outer scope's answers. */
static _Thread_local uint8_t scope_policy[AUTOCAST_MAX_DEPTH];
static _Thread_local uint8_t scope_dev[AUTOCAST_MAX_DEPTH][OARI_MAX_DEVICES];
static _Thread_local int depth;
/* Backward passes suspend autocast (oari_autocast_suspend). */
static _Thread_local int suspended;
_Thread_local bool oari_autocast_active;

static void refresh(void) {
    oari_autocast_active = depth > 0 && !suspended && scope[depth - 1] != OAR_F32;
}

/* ---- a low dtype the CPU only emulates --------------------------------------- */

static int emulated_mode = OAR_AUTOCAST_EMULATED_DEFAULT; /* (process-wide; atomic) */
/* The warnings given, per device (by id: the CPU's is 0) and dtype, in
 * this process: bits of WARNED_EMULATED (DEFAULT's), WARNED_PROBE (a
 * failed native_dot) */
enum { WARNED_EMULATED = 1, WARNED_PROBE = 2 };
static int warned[OARI_MAX_DEVICES][OAR_DTYPE_COUNT];

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

static const char *low_name(oar_dtype low) { return low == OAR_BF16 ? "bf16" : "f16"; }

/* True the first time for warning `what` about device d and dtype low. */
static bool first_warning(const oar_device *d, oar_dtype low, int what) {
    return (unsigned)d->id < OARI_MAX_DEVICES &&
           !(__atomic_fetch_or(&warned[d->id][low], what, __ATOMIC_RELAXED) & what);
}

/* The dtype a scope of low (with emulated-dtype policy `policy`) computes
 * its LOW ops in on device d, given d's native_dot answer; DEFAULT warns
 * once per device and dtype (per process) when d only emulates low. */
static oar_dtype compute_dtype(const oar_device *d, oar_dtype low, int policy, int native) {
    if (native != 0) return low; /* (a failed probe: as native, the behaviour before the probe existed) */
    if (policy == OAR_AUTOCAST_EMULATED_F32) return OAR_F32;
    if (policy == OAR_AUTOCAST_EMULATED_DEFAULT && first_warning(d, low, WARNED_EMULATED)) {
        const char *bad = NULL, *n = low_name(low);
        emulated_policy(&bad);
        bool cpu = d == oari_device_cpu();
        char who[48];
        snprintf(who, sizeof who, cpu ? "this CPU" : "device %s", d->name);
        oari_log(OAR_LOG_WARN, "autocast",
                 "%s has no native %s dot products (%s), so %s matmul and conv %sinside autocast scopes are "
                 "emulated and typically slower than f32. They run in %s anyway; set OAR_AUTOCAST_EMULATED=f32 "
                 "(or call oar_autocast_set_emulated) to compute them in f32 instead, or =low to keep %s "
                 "without this warning (docs/amp.md)%s%s%s",
                 who, n,
                 !cpu ? "its plugin's native_dot says its kernels emulate it or compute it in a wider type"
                 : low == OAR_BF16 ? "AVX512_BF16 or AMX-BF16 with oneDNN"
                                   : "oar's CPU kernels compute f16 in f32",
                 n, cpu ? "" : "on its tensors ", n, n, bad ? "; OAR_AUTOCAST_EMULATED=\"" : "", bad ? bad : "",
                 bad ? "\" is neither" : "");
    }
    return low;
}

/* The dtype the innermost scope's LOW ops compute in on plugin device d:
 * d's answer for this scope, asked on the first call (its native_dot,
 * which a failed probe, logged once, counts as native; the caller's
 * error state is kept, since the op goes on). */
static oar_dtype device_compute_dtype(const oar_device *d) {
    if ((unsigned)d->id >= OARI_MAX_DEVICES) return scope[depth - 1];
    uint8_t *c = &scope_dev[depth - 1][d->id];
    if (*c) return (oar_dtype)(*c - 1);
    oar_dtype low = scope[depth - 1];
    int prev_status = oari_last_status();
    char prev[1024] = "";
    if (oari_error_pending()) snprintf(prev, sizeof prev, "%s", oar_last_error());
    int native = oar_device_native_dot(d, low);
    if (native < 0) {
        if (first_warning(d, low, WARNED_PROBE))
            oari_log(OAR_LOG_WARN, "autocast", "could not ask device %s whether it computes %s dot products "
                     "natively (%s); its %s matmul and conv run in %s, as on a device that does",
                     d->name, low_name(low), oar_last_error(), low_name(low), low_name(low));
        if (prev[0]) oari_error(prev_status, "%s", prev);
        else oar_clear_error();
    }
    oar_dtype r = compute_dtype(d, low, scope_policy[depth - 1], native);
    *c = (uint8_t)(r + 1);
    return r;
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
    const char *bad;
    int policy = emulated_policy(&bad);
    scope_policy[depth] = (uint8_t)policy;
    memset(scope_dev[depth], 0, sizeof scope_dev[depth]);
    scope_compute[depth] = low == OAR_F32 ? OAR_F32
                           : compute_dtype(oari_device_cpu(), low, policy,
                                           oar_device_native_dot(oari_device_cpu(), low));
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
    case OARI_OP_gru_layer_train:
    case OARI_OP_lstm_layer_train:
    case OARI_OP_lstm_layer_backward:
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

/* A 2-D matrix stored transposed: a linear layer's W^T, a view of W. */
static bool stored_transposed(const oar_tensor *t) {
    return t->ndim == 2 && t->shape[0] > 1 && t->shape[1] > 1 && t->strides[0] == 1 &&
           t->strides[1] == t->shape[0];
}

/* *r = t cast to dtype (a new reference, recorded as ops). A matrix stored
 * transposed is cast as cast(W)^T: the copy keeps W's layout, so the cast
 * reads memory in order, and matmul's gradient rule, seeing a transposed
 * operand, gives W a contiguous gradient (grad_matmul in linalg.c) where
 * cast(W^T)'s would have needed a copy through the transpose. */
static int cast_keeping_layout(oar_tensor *t, oar_dtype dtype, oar_tensor **r) {
    oari_attrs ca = {.ni = 1, .i = {dtype}};
    if (!stored_transposed(t)) return oari_dispatch_run(OARI_OP_cast, 1, &t, &ca, r);
    oari_attrs swap = {.ni = 2, .i = {1, 0}};
    oar_tensor *w = NULL, *wc = NULL;
    int st = oari_dispatch_run(OARI_OP_permute, 1, &t, &swap, &w);
    if (!st) st = oari_dispatch_run(OARI_OP_cast, 1, &w, &ca, &wc);
    if (!st) st = oari_dispatch_run(OARI_OP_permute, 1, &wc, &swap, r);
    oar_tensor_release(w);
    oar_tensor_release(wc);
    return st;
}

int oari_autocast_dispatch(oari_op op, int n_in, oar_tensor *const *in, const oari_attrs *attrs,
                           oar_tensor **out) {
    oar_dtype want[OARI_MAX_IN];
    /* LOW ops compute in the scope's CPU dtype; on a plugin device's
     * tensors (the first input's device that is not the CPU) in the one
     * that device's answer and the scope's policy give */
    oar_dtype low = scope_compute[depth - 1];
    if (oari_autocast_policy(op) == OAR_AUTOCAST_LOW)
        for (int i = 0; i < n_in && n_in <= OARI_MAX_IN; i++)
            if (in[i] && in[i]->storage && in[i]->storage->device != oari_device_cpu()) {
                low = device_compute_dtype(in[i]->storage->device);
                break;
            }
    if (n_in < 0 || n_in > OARI_MAX_IN || !oari_autocast_targets(op, low, n_in, in, want))
        return oari_dispatch_run(op, n_in, in, attrs, out);
    oar_tensor *cin[OARI_MAX_IN] = {0};
    int st = 0;
    for (int i = 0; i < n_in; i++) cin[i] = in[i];
    for (int i = 0; i < n_in && !st; i++) {
        if (!in[i] || want[i] == in[i]->dtype) continue;
        oar_tensor *r = NULL;
        if (!(st = cast_keeping_layout(in[i], want[i], &r))) cin[i] = r;
    }
    if (!st) st = oari_dispatch_run(op, n_in, cin, attrs, out);
    else
        for (int j = 0; j < oari_op_defs[op]->n_out; j++) out[j] = NULL;
    for (int i = 0; i < n_in; i++)
        if (cin[i] != in[i]) oar_tensor_release(cin[i]);
    return st;
}
