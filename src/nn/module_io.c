/* A module's state dict as a safetensors file: saving every named tensor
 * of oar_module_state, and loading one back with a check of names, dtypes
 * and shapes against the module before anything is copied. */
#include "../core/core.h"

#include <oar/autograd.h>
#include <oar/io.h>
#include <oar/nn.h>
#include <oar/ops.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int oar_module_save(oar_module *m, const char *path) {
    const oar_state_entry *s;
    int n = oar_module_state(m, &s);
    if (n < 0) return oari_fail_status();
    size_t bytes = (size_t)(n ? n : 1) * (sizeof(char *) + sizeof(oar_tensor *));
    void *mem = oari_malloc(bytes);
    if (!mem) return oari_fail_status();
    const char **names = mem;
    oar_tensor **ts = (oar_tensor **)(names + (n ? n : 1));
    for (int i = 0; i < n; i++) {
        names[i] = s[i].name;
        ts[i] = s[i].tensor;
    }
    int st = oar_safetensors_save(path, n, names, ts);
    oari_free(mem, bytes);
    return st;
}

/* Appends to a bounded message buffer. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) OARI_PRINTF(4, 5);
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (k > 0) *len = *len + (size_t)k < size ? *len + (size_t)k : size - 1;
}

int oar_module_load(oar_module *m, const char *path) {
    const oar_state_entry *s;
    int n = oar_module_state(m, &s);
    if (n < 0) return oari_fail_status();
    oar_tensor_dict *d = oar_safetensors_load(path);
    if (!d) return oari_fail_status();
    char msg[900];
    size_t len = 0;
    int bad_count = 0;
    for (int i = 0; i < n; i++) {
        oar_tensor *want = s[i].tensor, *got = oar_tensor_dict_get(d, s[i].name);
        char a[200], b[200];
        if (!got) {
            append(msg, sizeof msg, &len, "%smissing \"%s\"", bad_count++ ? "; " : "", s[i].name);
        } else if (got->dtype != want->dtype || got->ndim != want->ndim ||
                   memcmp(got->shape, want->shape, (size_t)got->ndim * sizeof *got->shape)) {
            append(msg, sizeof msg, &len, "%s\"%s\" is %s %s in the file, %s %s in the module",
                   bad_count++ ? "; " : "", s[i].name, oar_dtype_name(got->dtype),
                   oari_shape_str(a, got->ndim, got->shape), oar_dtype_name(want->dtype),
                   oari_shape_str(b, want->ndim, want->shape));
        }
    }
    for (int i = 0; i < oar_tensor_dict_size(d); i++) {
        bool known = false;
        for (int k = 0; k < n && !known; k++)
            known = !strcmp(s[k].name, oar_tensor_dict_name(d, i));
        if (!known)
            append(msg, sizeof msg, &len, "%sunexpected \"%s\"", bad_count++ ? "; " : "",
                   oar_tensor_dict_name(d, i));
    }
    int st = 0;
    if (bad_count) {
        st = oari_error(OAR_ERR_INVALID,
                        "module_load: %s does not match the module (%d "
                        "mismatches): %s",
                        path, bad_count, msg);
    } else {
        oar_no_grad_push();
        for (int i = 0; i < n && !st; i++)
            st = oar_copy_(s[i].tensor, oar_tensor_dict_get(d, s[i].name));
        oar_no_grad_pop();
    }
    oar_tensor_dict_free(d);
    return st;
}
