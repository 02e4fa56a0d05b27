/* Reading the columns of src/ops/elementwise.def: each column's value is a
 * word (maybe with arguments), read by pasting it onto a prefix. What
 * several readers share is here (macros only: the device plugins include
 * it too). */
#ifndef OARI_EW_TABLE_H
#define OARI_EW_TABLE_H

#ifndef EW_CAT
#define EW_CAT_(a, b) a##b
#define EW_CAT(a, b) EW_CAT_(a, b)
#endif
#define EW_STR_(x) #x
#define EW_STR(x) EW_STR_(x)

/* Kinds of dtype suffix, as bits: bool, the integers, the floats. */
#define EW_K_B 1
#define EW_K_I 2
#define EW_K_R 4

/* gen: the suffix kinds of the generated code and device kernels. */
#define EW_GEN_MASK(gen) EW_CAT(EW_GENMASK_, gen)
#define EW_GENMASK_GEN_R EW_K_R
#define EW_GENMASK_GEN_ALL (EW_K_B | EW_K_I | EW_K_R)
#define EW_GENMASK_GEN_B EW_K_B
#define EW_GENMASK_GEN_NONE(why) 0
/* gen's reason when it is GEN_NONE, else NULL */
#define EW_GEN_WHY(gen) EW_CAT(EW_GENWHY_, gen)
#define EW_GENWHY_GEN_R NULL
#define EW_GENWHY_GEN_ALL NULL
#define EW_GENWHY_GEN_B NULL
#define EW_GENWHY_GEN_NONE(why) why

/* rule: whether the output is bool (1) or of the kernel's dtype (0; to-real
 * rules are the same dtype on real inputs, all the generated code sees). */
#define EW_OUT_BOOL(rule) EW_CAT(EW_OUTBOOL_, rule)
#define EW_OUTBOOL_SAME 0
#define EW_OUTBOOL_SAME_C 0
#define EW_OUTBOOL_SAME_CB 0
#define EW_OUTBOOL_FLOAT 0
#define EW_OUTBOOL_FLOAT_C 0
#define EW_OUTBOOL_TO_BOOL 1
#define EW_OUTBOOL_TO_REAL_C 0
#define EW_OUTBOOL_TO_REAL_CB 0
#define EW_OUTBOOL_FLOAT_TO_REAL 0
#define EW_OUTBOOL_ARITH 0
#define EW_OUTBOOL_ARITH_B 0
#define EW_OUTBOOL_ARITH_C 0
#define EW_OUTBOOL_ARITH_CB 0
#define EW_OUTBOOL_TRUEDIV 0
#define EW_OUTBOOL_TRUEDIV_C 0
#define EW_OUTBOOL_COMPARE 1
#define EW_OUTBOOL_COMPARE_C 1
#define EW_OUTBOOL_LOGICAL 1
#define EW_OUTBOOL_CUSTOM(fn, cls) EW_OUTBOOL_##cls

/* alt: 1 when the row has an ALT form */
#define EW_HAS_ALT(alt) EW_CAT(EW_HASALT_, alt)
#define EW_HASALT_NO_ALT 0
#define EW_HASALT_ALT(f) 1

/* api: 1 when the public function is made from the row */
#define EW_IS_PUBLIC(api) EW_CAT(EW_ISPUBLIC_, api)
#define EW_ISPUBLIC_PUBLIC 1
#define EW_ISPUBLIC_API_OWN 0
#define EW_ISPUBLIC_INTERNAL 0

/* Expands to nothing, or to its arguments. */
#define EW_DROP(...)
#define EW_KEEP(...) __VA_ARGS__

#endif
