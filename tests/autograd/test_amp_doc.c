/* docs/amp.md's table is generated from the op registry and autocast's
 * policy table (src/ops/autocast.c): every defined op exactly once with
 * its policy. A normal run checks that the committed file matches and
 * that the lists are sound (no op of the low list refuses half dtypes, the
 * public query agrees with the table); `test_amp_doc --write [path]`
 * rewrites it (path defaults to ../docs/amp.md, as tests run from tests/). */
#include "../test.h"

#include "ops/op.h"

#include <stdarg.h>

typedef struct buf {
    char *s;
    size_t len, cap;
} buf;

static void put(buf *b, const char *fmt, ...) OARI_PRINTF(2, 3);
static void put(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static const char *policy_name(int p) {
    return p == OAR_AUTOCAST_LOW ? "low (bf16/f16)" : p == OAR_AUTOCAST_F32 ? "f32" : "promote";
}

static char *generate(void) {
    buf b = {0};
    int count[3] = {0};
    for (int op = 0; op < OARI_OP_COUNT; op++)
        if (oari_op_defs[op]) count[oari_autocast_policy((oari_op)op)]++;
    put(&b, "# Automatic mixed precision\n\n");
    put(&b, "The table is generated from the op registry and autocast's policy table\n"
            "(`src/ops/autocast.c`) by `tests/autograd/test_amp_doc.c`; do not edit it.\n"
            "Regenerate with `build/test_amp_doc --write ../docs/amp.md` run from `tests/`.\n\n");
    put(&b, "Inside `oar_autocast_push(OAR_BF16)` (or `OAR_F16`) every op call casts its\n"
            "floating inputs by its op's policy before it runs (`include/oar/amp.h`):\n\n"
            "- **low**: f32, f16 and bf16 inputs are cast to the scope's dtype (matrix\n"
            "  products and convolutions, and so `oar_linear`, `oar_bmm`, `oar_einsum`,\n"
            "  `oar_conv1d` and attention's products);\n"
            "- **f32**: f16 and bf16 inputs are cast to f32 (softmax, norms, reductions,\n"
            "  exp/log/pow, linalg, FFT; and so mean, the losses, cross entropy);\n"
            "- **promote**: dimensioned inputs mixing f16/bf16 with f32 are cast to the\n"
            "  widest; otherwise the op runs in its inputs' dtype. In-place and view ops\n"
            "  are never cast.\n\n"
            "The casts are recorded ops: gradients reach f32 leaves in f32, and backward\n"
            "passes run with autocast suspended (each gradient in its forward op's dtype).\n"
            "A matrix stored transposed (a linear layer's W^T) is cast as cast(W)^T, so\n"
            "the low copy keeps W's layout and W's gradient arrives contiguous.\n"
            "Composite functions have no row: their primitives decide. The graph pass\n"
            "`amp` (`amp_f16`) inserts the same casts into a graph traced without\n"
            "autocast. The loss scaler (`oar_grad_scaler_*`), O2 master weights\n"
            "(`oar_amp_o2_*`) and `oar_fit`'s `autocast_dtype` and `scaler` options are in\n"
            "the same header.\n\n");
    put(&b, "## A low dtype the CPU only emulates\n\n"
            "A CPU without native bf16 dot products (AVX512_BF16 or AMX-BF16, used\n"
            "through oneDNN) runs bf16 matmul and conv emulated, typically slower than\n"
            "f32 (2x on an AVX-512 CPU without AVX512_BF16: `bench/RESULTS.md`); a CPU\n"
            "without AVX-512 (an AVX2 Zen or Haswell), where Debian's oneDNN 2.6 has no\n"
            "bf16 kernels at all, computes them in f32 between casts; oar's CPU\n"
            "computes f16 in f32 between casts on every CPU. Ask with\n"
            "`oar_device_native_dot(oar_device_cpu(), OAR_BF16)` (`include/oar/device.h`;\n"
            "`OAR_CPU_NATIVE_BF16` / `OAR_CPU_NATIVE_F16` = `0` or `1` override the\n"
            "answer). When a scope opens on such a CPU, autocast follows a policy, set by\n"
            "`oar_autocast_set_emulated` or else by `OAR_AUTOCAST_EMULATED`:\n\n"
            "| policy | LOW ops on CPU tensors | message |\n"
            "| --- | --- | --- |\n"
            "| default (nothing set) | run in the low dtype, emulated: the same results on every CPU | one warning per dtype and process, naming the choices |\n"
            "| `low` (`OAR_AUTOCAST_EMULATED_LOW`) | run in the low dtype, emulated | none |\n"
            "| `f32` (`OAR_AUTOCAST_EMULATED_F32`) | compute in f32 (f16/bf16 inputs cast up): f32 speed and results | none |\n\n"
            "Under `f32` the API works as in any scope: `oar_autocast_enabled()` is true,\n"
            "`oar_autocast_dtype()` is the scope's dtype (`oar_autocast_compute_dtype()`\n"
            "says f32), the f32 and promote lists apply, O2 models keep their low\n"
            "parameters (each LOW op casts them up) and the loss scaler is unchanged. A\n"
            "scope keeps the choice made when it opened; the graph passes `amp` /\n"
            "`amp_f16` insert the scope's dtype regardless. PyTorch runs CPU autocast in\n"
            "bf16 on any CPU and says nothing, and on a device without the dtype warns\n"
            "and disables autocast: the default keeps the first's results and adds the\n"
            "warning; `f32` gives the second's speed with the API kept.\n\n"
            "LOW ops on a plugin device's tensors follow the same policy by that\n"
            "device's own answer, `oar_device_native_dot(device, dtype)` (its plugin's\n"
            "`native_dot`: OpenCL says no for f16 and bf16, since none of its kernels\n"
            "computes in them; CUDA says yes for f16 from compute capability 7.0 and\n"
            "for bf16 from 8.0). A device is asked on the first LOW op on its tensors\n"
            "in a scope, and the scope keeps that answer; the default's warning names\n"
            "the device and comes once per device and dtype; under `f32` its LOW ops\n"
            "compute in f32, on its f32 kernels. A device that answers yes, or\n"
            "has no `native_dot`, or fails to answer (logged once), runs the scope's\n"
            "dtype; the CPU's answer never decides for a device, nor a device's for the\n"
            "CPU. `oar_autocast_compute_dtype()` stays the CPU's; an op's output dtype\n"
            "shows what ran.\n\n");
    put(&b, "%d ops: %d low, %d f32, %d promote.\n\n", count[0] + count[1] + count[2],
        count[OAR_AUTOCAST_LOW], count[OAR_AUTOCAST_F32], count[OAR_AUTOCAST_PROMOTE]);
    put(&b, "| op | policy |\n| --- | --- |\n");
    for (int op = 0; op < OARI_OP_COUNT; op++)
        if (oari_op_defs[op])
            put(&b, "| %s | %s |\n", oari_op_name((oari_op)op), policy_name(oari_autocast_policy((oari_op)op)));
    return b.s;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* The lists are sound: a low op takes half dtypes; the public query
 * agrees with the table for every op. */
static void check_lists(void) {
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        const oari_op_def *d = oari_op_defs[op];
        if (!d) continue;
        int p = oari_autocast_policy((oari_op)op);
        CHECK(p >= OAR_AUTOCAST_PROMOTE && p <= OAR_AUTOCAST_F32);
        if (p == OAR_AUTOCAST_LOW && (d->flags & OARI_F_NO_HALF)) {
            fprintf(stderr, "%s is on the low list but refuses half dtypes\n", d->name);
            CHECK(false);
        }
        CHECK(oar_autocast_op_policy(oari_op_name((oari_op)op)) == p);
    }
}

int main(int argc, char **argv) {
    test_current = "amp_doc";
    const char *path = "../docs/amp.md";
    bool write = argc > 1 && !strcmp(argv[1], "--write");
    if (write && argc > 2) path = argv[2];
    check_lists();
    char *doc = generate();
    if (write) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        CHECK(f != NULL);
        if (f) {
            fputs(doc, f);
            CHECK(fclose(f) == 0 && rename(tmp, path) == 0);
            printf("wrote %s\n", path);
        }
    } else {
        char *old = read_file(path);
        CHECK(old != NULL);
        bool same = old && !strcmp(old, doc);
        if (!same)
            fprintf(stderr, "%s is out of date with the op registry; regenerate it with "
                    "`test_amp_doc --write %s` (run from tests/)\n", path, path);
        CHECK(same);
        free(old);
    }
    free(doc);
    return test_summary();
}
