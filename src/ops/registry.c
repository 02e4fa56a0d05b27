/* The table of op definitions, expanded from ops.def. Each definition lives
 * in its group's file (unary.c, reduce.c, ...); the references are strong,
 * so an OP() line without a definition fails the link, and liboar.a pulls
 * in every op group. An OP_INSTALLED row's definition belongs to a higher
 * layer, which installs it at start-up. */
#include "op.h"

#include <string.h>

#define OP(name) extern const oari_op_def oari_def_##name;
#define OP_INSTALLED(name)
#include "ops.def"
#undef OP_INSTALLED
#undef OP

const oari_op_def *oari_op_defs[OARI_OP_COUNT] = {
#define OP(name) [OARI_OP_##name] = &oari_def_##name,
#define OP_INSTALLED(name)
#include "ops.def"
#undef OP_INSTALLED
#undef OP
};

static const bool installed[OARI_OP_COUNT] = {
#define OP(name)
#define OP_INSTALLED(name) [OARI_OP_##name] = true,
#include "ops.def"
#undef OP_INSTALLED
#undef OP
};

int oari_op_install(oari_op op, const oari_op_def *def) {
    if ((unsigned)op >= OARI_OP_COUNT || !installed[op] || !def)
        return oari_error(OAR_ERR_INVALID, "op registry: %s is not an op a layer installs",
                          oari_op_name(op));
    __atomic_store_n(&oari_op_defs[op], def, __ATOMIC_RELEASE);
    return 0;
}

static const char *const op_names[OARI_OP_COUNT] = {
#define OP(name) [OARI_OP_##name] = #name,
#include "ops.def"
#undef OP
};

int oari_op_lookup(const char *name) {
    for (int i = 0; i < OARI_OP_COUNT; i++)
        if (!strcmp(op_names[i], name)) return i;
    return -1;
}

const char *oari_op_name(oari_op op) {
    return (unsigned)op < OARI_OP_COUNT ? op_names[op] : "?";
}

oari_attrs oari_attrs_ints(int n, const int64_t *v) {
    oari_attrs a = {0};
    if (n > OARI_MAX_IATTR) n = OARI_MAX_IATTR;
    a.ni = n;
    if (n) memcpy(a.i, v, (size_t)n * sizeof *v);
    return a;
}
