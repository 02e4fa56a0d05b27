/* The scalar formulas of the elementwise ops in generated code: each row of
 * src/ops/elementwise.def, its formula's text rendered for the node's
 * dtype (a word W becomes W_<suffix>, the inputs the operand expressions,
 * P0/P1 exact literals of the attributes). The words are defined by
 * src/ops/ew_math.h, whose text heads every generated unit (C, OpenCL C,
 * CUDA C), so a fused kernel computes with the CPU kernels' definitions.
 * Integer and bool values only flow through the rows whose gen column
 * holds them (comparisons, where, logical ops) and casts; f16/bf16 and
 * complex values are never fused. */
#include "compiler.h"

#include "../ops/ew_table.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

const char *oari_c_type(oar_dtype d) {
    switch (d) {
    case OAR_F32: return "float";
    case OAR_F64: return "double";
    case OAR_BOOL: case OAR_U8: return "uint8_t";
    case OAR_I32: return "int32_t";
    case OAR_I64: return "int64_t";
    default: return NULL;
    }
}

/* A double as a C literal of type T: exact for float and double. */
static void literal(oari_sbuf *o, const char *T, double x) {
    if (isnan(x)) oari_sbuf_printf(o, "(%s)NAN", T);
    else if (isinf(x)) oari_sbuf_printf(o, "(%s)%sINFINITY", T, x < 0 ? "-" : "");
    else oari_sbuf_printf(o, "(%s)%.17g", T, x);
}

/* ---- the table's rows, by op ---- */

typedef struct ew_form {
    int op;
    int n_in;
    unsigned gen;           /* EW_K_* bits: the dtypes it is rendered for */
    bool out_bool;          /* bool output (else the kernel dtype's) */
    const char *forward;    /* the formula's text */
    const char *alt;        /* the form when integer attribute 0 is set, or NULL */
} ew_form;

#define EW_ALT_TEXT(alt) EW_CAT(EW_ALTTEXT_, alt)
#define EW_ALTTEXT_NO_ALT NULL
#define EW_ALTTEXT_ALT(f) #f
#define EW_FORM(op, n, rule, gen, forward, alt)                                                \
    {OARI_OP_##op, n, EW_GEN_MASK(gen), EW_OUT_BOOL(rule), #forward, alt},
static const ew_form ew_forms[] = {
#define EW_UNARY(op, rule, cpu, gen, api, forward, alt, gradient, saved, test, onnx, doc) \
    EW_FORM(op, 1, rule, gen, forward, EW_ALT_TEXT(alt))
#define EW_BINARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc) \
    EW_FORM(op, 2, rule, gen, forward, NULL)
#define EW_TERNARY(op, rule, cpu, gen, api, forward, gradient, saved, test, onnx, doc) \
    EW_FORM(op, 3, rule, gen, forward, NULL)
#define EW_NONE(op, why)
#include "../ops/elementwise.def"
};

/* The dtype suffix of the words and its kind (EW_K_*), or NULL. */
static const char *suffix(oar_dtype d, unsigned *kind) {
    switch (d) {
    case OAR_BOOL: *kind = EW_K_B; return "b1";
    case OAR_U8: *kind = EW_K_I; return "u8";
    case OAR_I32: *kind = EW_K_I; return "i32";
    case OAR_I64: *kind = EW_K_I; return "i64";
    case OAR_F32: *kind = EW_K_R; return "f32";
    case OAR_F64: *kind = EW_K_R; return "f64";
    default: *kind = 0; return NULL;
    }
}

/* Writes formula f with words suffixed by sfx, the inputs x / a, b, c as
 * operand expressions arg[], P0/P1 as literals of type T. False if it
 * reads an attribute the node lacks. */
static bool render(const char *f, const char *sfx, const char *T, const char *const *arg,
                   const oari_attrs *at, oari_sbuf *o) {
    for (const char *p = f; *p;) {
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *s = p;
            while (isalnum((unsigned char)*p) || *p == '_') p++;
            size_t n = (size_t)(p - s);
            if (n == 1 && strchr("xabc", *s)) {
                oari_sbuf_puts(o, arg[*s == 'x' ? 0 : *s - 'a']);
            } else if (n == 2 && s[0] == 'P' && (s[1] == '0' || s[1] == '1')) {
                int k = s[1] - '0';
                if (at->nf <= k) return false;
                literal(o, T, at->f[k]);
            } else {
                oari_sbuf_printf(o, "%.*s_%s", (int)n, s, sfx);
            }
        } else if (isdigit((unsigned char)*p) || *p == '.') { /* a number, exponent included */
            const char *s = p;
            while (isalnum((unsigned char)*p) || *p == '.' ||
                   ((*p == '-' || *p == '+') && (p[-1] == 'e' || p[-1] == 'E')))
                p++;
            oari_sbuf_printf(o, "%.*s", (int)(p - s), s);
        } else {
            oari_sbuf_printf(o, "%c", *p++);
        }
    }
    return true;
}

static oar_dtype in_dtype(const oar_graph *g, const oari_gnode *n, int k) {
    return n->in[k] >= 0 ? g->values[n->in[k]].dtype : OAR_DTYPE_INVALID;
}

/* A table row's C, or false when the node's dtypes are not its gen column's. */
static bool table_form(const ew_form *r, const oar_graph *g, const oari_gnode *n, const char *const *a,
                       oari_sbuf *o) {
    oar_dtype od = g->values[n->out[0]].dtype, kd = in_dtype(g, n, r->n_in == 3 ? 1 : 0);
    unsigned kind;
    const char *sfx = suffix(kd, &kind);
    if (!sfx || !(r->gen & kind) || n->n_in != r->n_in) return false;
    for (int k = 0; k < r->n_in; k++)
        if (in_dtype(g, n, k) != (r->n_in == 3 && k == 0 ? OAR_BOOL : kd)) return false;
    if (od != (r->out_bool ? OAR_BOOL : kd)) return false;
    const char *f = r->alt && n->attrs.ni && n->attrs.i[0] ? r->alt : r->forward;
    return render(f, sfx, oari_c_type(kd), a, &n->attrs, o);
}

bool oari_c_elementwise(const oar_graph *g, const oari_gnode *n, const char *const *a, oari_sbuf *o) {
    oar_dtype od = g->values[n->out[0]].dtype, d0 = in_dtype(g, n, 0);
    const char *T = oari_c_type(od);
    if (!T) return false;
    for (size_t i = 0; i < sizeof ew_forms / sizeof *ew_forms; i++)
        if (ew_forms[i].op == (int)n->op) return table_form(&ew_forms[i], g, n, a, o);
    switch (n->op) {
    case OARI_OP_contiguous: /* a copy: the index arithmetic did the moving */
        if (d0 != od) return false;
        oari_sbuf_puts(o, a[0]);
        return true;
    case OARI_OP_cast:
        /* to a float from anything handled; to bool as "non-zero" */
        if (!oari_c_type(d0)) return false;
        if (od == OAR_F32 || od == OAR_F64) oari_sbuf_printf(o, "(%s)%s", T, a[0]);
        else if (od == OAR_BOOL) oari_sbuf_printf(o, "(uint8_t)(%s != 0)", a[0]);
        else return false;
        return true;
    default:
        return false;
    }
}
