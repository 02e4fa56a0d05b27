/* The elementwise table read once per dtype suffix (cpu_ew.h): included
 * once by each file that instantiates rows, with its row macros defined. */
#define EW_PASS_B EW_DROP
#define EW_PASS_I EW_DROP
#define EW_PASS_H EW_DROP
#define EW_PASS_R EW_DROP
#define EW_PASS_C EW_DROP

#undef EW_PASS_B
#define EW_PASS_B EW_KEEP
#define EW_SFX b1
#include "../../ops/elementwise.def"
#undef EW_SFX
#undef EW_PASS_B
#define EW_PASS_B EW_DROP

#undef EW_PASS_I
#define EW_PASS_I EW_KEEP
#define EW_SFX u8
#include "../../ops/elementwise.def"
#undef EW_SFX
#define EW_SFX i8
#include "../../ops/elementwise.def"
#undef EW_SFX
#define EW_SFX i32
#include "../../ops/elementwise.def"
#undef EW_SFX
#define EW_SFX i64
#include "../../ops/elementwise.def"
#undef EW_SFX
#undef EW_PASS_I
#define EW_PASS_I EW_DROP

#undef EW_PASS_H
#define EW_PASS_H EW_KEEP
#define EW_SFX h16
#include "../../ops/elementwise.def"
#undef EW_SFX
#undef EW_PASS_H
#define EW_PASS_H EW_DROP

#undef EW_PASS_R
#define EW_PASS_R EW_KEEP
#define EW_SFX f32
#include "../../ops/elementwise.def"
#undef EW_SFX
#define EW_SFX f64
#include "../../ops/elementwise.def"
#undef EW_SFX
#undef EW_PASS_R
#define EW_PASS_R EW_DROP

#undef EW_PASS_C
#define EW_PASS_C EW_KEEP
#define EW_SFX c64
#include "../../ops/elementwise.def"
#undef EW_SFX
#define EW_SFX c128
#include "../../ops/elementwise.def"
#undef EW_SFX

#undef EW_PASS_B
#undef EW_PASS_I
#undef EW_PASS_H
#undef EW_PASS_R
#undef EW_PASS_C
