/* Helpers shared by the shape rules of every op group. */
#include "op.h"

#include <string.h>

void oari_meta_from(oari_meta *m, const oar_tensor *t) {
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof m->shape);
}

/* PyTorch's three priority classes: dimensioned tensors, 0-d tensors,
 * wrapped numbers. A lower class only wins if its category (bool < int <
 * float < complex) is higher. */
static int category(oar_dtype d) {
    return d == OAR_BOOL ? 0 : oar_dtype_is_integral(d) ? 1 : oar_dtype_is_float(d) ? 2 : 3;
}

oar_dtype oari_result_type(int n, oar_tensor *const *in) {
    int have[3] = {0, 0, 0};
    oar_dtype best[3] = {OAR_BOOL, OAR_BOOL, OAR_BOOL};
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        int cls = in[i]->wrapped_number ? 2 : in[i]->ndim == 0 ? 1 : 0;
        oar_dtype d = in[i]->dtype;
        if (cls == 2) { /* a Python number: bool, int64, float (default f32) or complex */
            d = d == OAR_BOOL ? OAR_BOOL : oar_dtype_is_integral(d) ? OAR_I64
                : oar_dtype_is_float(d) ? OAR_F32 : OAR_C64;
        }
        best[cls] = have[cls] ? (oar_dtype)oar_promote_types(best[cls], d) : d;
        have[cls] = 1;
    }
    oar_dtype r = OAR_BOOL;
    bool any = false;
    for (int cls = 0; cls < 3; cls++) {
        if (!have[cls]) continue;
        if (!any) {
            r = best[cls];
            any = true;
        } else if (category(best[cls]) > category(r)) {
            /* e.g. i64 tensor * 2.5 -> f32; f16 tensor * 1j -> c32 (we have c64) */
            if (category(best[cls]) == 3 && oar_dtype_is_float(r))
                r = r == OAR_F64 ? OAR_C128 : OAR_C64;
            else if (cls == 2 && category(best[cls]) == 2)
                r = OAR_F32; /* default float dtype */
            else
                r = best[cls];
        }
    }
    return r;
}

int oari_check_dtype(const char *op, const oar_tensor *t, bool ok, const char *want) {
    if (ok) return 0;
    return oari_error(OAR_ERR_INVALID, "%s: expected %s, got %s", op, want,
                      oar_dtype_name(t->dtype));
}
