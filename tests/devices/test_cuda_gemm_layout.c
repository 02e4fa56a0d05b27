/* The operand layouts the cuda plugin hands to cuBLAS in place
 * (plugins/cuda/cuda_gemm_layout.h), checked on the CPU against a model of
 * cuBLAS's column-major addressing: a layout accepted must put every
 * element (i, j) where cuBLAS will read it (op N: j + i*ld, op T:
 * i + j*ld, in the column-major view of the row-major operand) and
 * cuBLAS must read nothing past the operand's last element. Expanded
 * (stride-0), overlapping and negative-stride operands must be refused:
 * cuBLAS would read past the buffer (issue 25). The batched plan
 * (oar_cuda_gemm_plan_make: one cublasGemmStridedBatchedEx for a matmul
 * with batch dims, broadcast batches and 1-D operands) is checked the same
 * way: for every batch, row and column, the element cuBLAS reads at
 * b * stride + its in-matrix offset is the element the view names, and the
 * output is written densely; layouts it cannot express are refused. */
#include "test.h"

#include "../../plugins/cuda/cuda_gemm_layout.h"

/* The element offset cuBLAS reads for (i, j) of the layout it accepted. */
static int64_t cublas_offset(bool transposed, int64_t ld, int64_t i, int64_t j) {
    return transposed ? i + j * ld : j + i * ld;
}

/* Whether every element of [rows, cols] with strides (s0, s1) has an
 * offset of its own (no two elements alias) and all offsets are >= 0
 * (a negative stride is refused: cuBLAS has none). */
static bool distinct_elements(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
    if (rows <= 0 || cols <= 0) return true;
    if (rows == 1) s0 = 0; /* the stride of an extent-1 dim is never used */
    if (cols == 1) s1 = 0;
    int64_t span = (rows - 1) * (s0 < 0 ? -s0 : s0) + (cols - 1) * (s1 < 0 ? -s1 : s1) + 1;
    if (s0 < 0 || s1 < 0 || span > 1 << 16) return false;
    unsigned char *seen = calloc((size_t)span, 1);
    bool ok = seen != NULL;
    for (int64_t i = 0; i < rows && ok; i++)
        for (int64_t j = 0; j < cols && ok; j++) {
            int64_t off = i * s0 + j * s1;
            if (seen[off]) ok = false;
            seen[off] = 1;
        }
    free(seen);
    return ok;
}

/* Every small shape and stride pair: accepted layouts are addressed as
 * cuBLAS addresses them and read nothing past the last element; the usual
 * layouts are accepted. */
static void test_exhaustive(void) {
    int accepted = 0, refused_aliasing = 0;
    for (int64_t rows = 1; rows <= 5; rows++)
        for (int64_t cols = 1; cols <= 5; cols++)
            for (int64_t s0 = -2; s0 <= 12; s0++)
                for (int64_t s1 = -2; s1 <= 12; s1++) {
                    bool t;
                    int64_t ld = -1;
                    bool ok = oar_cuda_gemm_layout((int64_t[]){rows, cols}, (int64_t[]){s0, s1}, &t, &ld);
                    bool distinct = distinct_elements(rows, cols, s0, s1);
                    if (!distinct) {
                        if (ok) fprintf(stderr, "accepted aliasing [%lld, %lld] strides (%lld, %lld)\n",
                                        (long long)rows, (long long)cols, (long long)s0, (long long)s1);
                        CHECK(!ok);
                        refused_aliasing += !ok;
                        continue;
                    }
                    if (!ok) continue;
                    accepted++;
                    int64_t last = (rows - 1) * s0 + (cols - 1) * s1, furthest = 0;
                    bool same = ld >= 1;
                    for (int64_t i = 0; i < rows; i++)
                        for (int64_t j = 0; j < cols; j++) {
                            int64_t off = cublas_offset(t, ld, i, j);
                            same = same && off == i * s0 + j * s1;
                            if (off > furthest) furthest = off;
                        }
                    if (!same) fprintf(stderr, "[%lld, %lld] strides (%lld, %lld): cuBLAS reads elsewhere (ld %lld)\n",
                                       (long long)rows, (long long)cols, (long long)s0, (long long)s1, (long long)ld);
                    CHECK(same);
                    CHECK(furthest <= last);
                }
    CHECK(accepted > 100);
    CHECK(refused_aliasing > 100);
}

static void test_cases(void) {
    bool t;
    int64_t ld;
    /* contiguous [4, 6]: op N, ld 6 */
    CHECK(oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){6, 1}, &t, &ld) && !t && ld == 6);
    /* its transpose, a [6, 4] view with strides (1, 6): op T, ld 6 */
    CHECK(oar_cuda_gemm_layout((int64_t[]){6, 4}, (int64_t[]){1, 6}, &t, &ld) && t && ld == 6);
    /* a slice of columns of a [4, 10] matrix: ld 10 */
    CHECK(oar_cuda_gemm_layout((int64_t[]){4, 3}, (int64_t[]){10, 1}, &t, &ld) && !t && ld == 10);
    /* expanded rows (a [6] vector broadcast to [4, 6]) and columns */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){0, 1}, &t, &ld));
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){1, 0}, &t, &ld));
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 1}, (int64_t[]){0, 1}, &t, &ld));
    /* a scalar expanded to [3, 3] */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){3, 3}, (int64_t[]){0, 0}, &t, &ld));
    /* rows overlapping (ld smaller than a row) */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){4, 6}, (int64_t[]){3, 1}, &t, &ld));
    /* a dim of extent 1 takes any stride */
    CHECK(oar_cuda_gemm_layout((int64_t[]){1, 6}, (int64_t[]){0, 1}, &t, &ld) && !t && ld == 6);
    CHECK(oar_cuda_gemm_layout((int64_t[]){5, 1}, (int64_t[]){1, 0}, &t, &ld));
    /* too large for cuBLAS's int dims */
    CHECK(!oar_cuda_gemm_layout((int64_t[]){(int64_t)INT_MAX + 1, 2}, (int64_t[]){2, 1}, &t, &ld));
    CHECK(!oar_cuda_gemm_layout((int64_t[]){2, 2}, (int64_t[]){(int64_t)INT_MAX + 1, 1}, &t, &ld));
    /* outputs: only the dense row-major matrix */
    CHECK(oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){6, 1}));
    CHECK(oar_cuda_gemm_out_ok((int64_t[]){1, 6}, (int64_t[]){99, 1}));
    CHECK(!oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){1, 4}));
    CHECK(!oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){10, 1}));
    CHECK(!oar_cuda_gemm_out_ok((int64_t[]){4, 6}, (int64_t[]){0, 1}));
}

/* ---- the batched plan ------------------------------------------------------ */

enum { T_TRANS = 1, T_PAD = 2, T_EXPAND = 4, T_REVERSE = 8 };

/* An operand [batch..., r, c] (or [c] when vec) laid out as `kind` says:
 * column-major matrix (T_TRANS), rows padded by 2 (T_PAD), the row dim
 * expanded (T_EXPAND, stride 0), batch dims in reverse memory order
 * (T_REVERSE); extent-1 batch dims get a stride of 7 (never used). */
static int make_view(int nb, const int64_t *bshape, int64_t r, int64_t c, bool vec, int kind, int64_t *shape,
                     int64_t *st) {
    int nd = 0;
    if (vec) {
        shape[0] = c;
        st[0] = kind & T_PAD ? 3 : 1;
        return 1;
    }
    int64_t sr, sc;
    if (kind & T_TRANS) sr = 1, sc = r + (kind & T_PAD ? 2 : 0);
    else sc = 1, sr = c + (kind & T_PAD ? 2 : 0);
    if (kind & T_EXPAND) sr = 0;
    int64_t base = (r - 1) * sr + (c - 1) * sc + 1;
    for (int i = 0; i < nb; i++) shape[nd++] = bshape[i];
    int64_t step = base;
    for (int k = 0; k < nb; k++) {
        int i = kind & T_REVERSE ? k : nb - 1 - k;
        st[i] = bshape[i] == 1 ? 7 : step;
        step *= bshape[i];
    }
    shape[nd] = r, st[nd++] = sr;
    shape[nd] = c, st[nd++] = sc;
    return nd;
}

/* The offset of element (batch multi-index bi over the output's nb batch
 * dims, row i, column j) in a view of rank nd (its batch dims right-aligned
 * against the output's, extent-1 dims broadcast); vec: a 1-D operand (its
 * one dim is the row dim for b, the column dim for a: `vec_is_rows`). */
static int64_t view_offset(int nd, const int64_t *shape, const int64_t *st, int nb, const int64_t *bi, int64_t i,
                           int64_t j, bool vec, bool vec_is_rows) {
    if (vec) return (vec_is_rows ? i : j) * st[0];
    int64_t off = i * st[nd - 2] + j * st[nd - 1];
    for (int d = 0; d < nd - 2; d++)
        if (shape[d] != 1) off += bi[d + (nb - (nd - 2))] * st[d];
    return off;
}

static int64_t blas_read(bool t, int64_t ld, int64_t i, int64_t j) { return cublas_offset(t, ld, i, j); }

/* One case: plan, and when accepted, check every address of A, B and out. */
static bool plan_case(int nba, const int64_t *bsa, int ka, bool a1, int nbb, const int64_t *bsb, int kb, bool b1,
                      int64_t n, int64_t k, int64_t m, bool *checked_ok) {
    int64_t sha[10], sta[10], shb[10], stb[10], sho[10], sto[10];
    int nda = make_view(nba, bsa, n, k, a1, ka, sha, sta), ndb = make_view(nbb, bsb, k, b1 ? k : m, b1, kb, shb, stb);
    int nb = 0, ba = a1 ? 0 : nba, bb = b1 ? 0 : nbb, nbo = ba > bb ? ba : bb;
    for (int i = 0; i < nbo; i++) {
        int ia = i - (nbo - ba), ib = i - (nbo - bb);
        int64_t ea = ia >= 0 ? bsa[ia] : 1, eb = ib >= 0 ? bsb[ib] : 1;
        sho[nb++] = ea == 1 ? eb : ea;
    }
    int ndo = nb;
    if (!a1) sho[ndo++] = n;
    if (!b1) sho[ndo++] = m;
    int64_t want = 1;
    for (int i = ndo - 1; i >= 0; i--) sto[i] = want, want *= sho[i];
    oar_cuda_gemm_plan p, q;
    bool ok = oar_cuda_gemm_plan_make(nda, sha, sta, ndb, shb, stb, ndo, sho, sto, &p);
    bool ok_in = oar_cuda_gemm_plan_inputs(nda, sha, sta, ndb, shb, stb, &q);
    CHECK(ok == ok_in); /* supports_op (operands alone) agrees with the kernel (with the output) */
    *checked_ok = true;
    if (!ok) return false;
    CHECK(p.n == (a1 ? 1 : n) && p.k == k && p.m == (b1 ? 1 : m));
    CHECK(p.n == q.n && p.m == q.m && p.k == q.k && p.batch == q.batch && p.ta == q.ta && p.tb == q.tb &&
          p.lda == q.lda && p.ldb == q.ldb && p.sa == q.sa && p.sb == q.sb);
    int64_t bi[8] = {0};
    for (int64_t b = 0; b < p.batch; b++) {
        int64_t rem = b; /* b's multi-index over the output's batch dims */
        for (int d = nb - 1; d >= 0; d--) bi[d] = rem % sho[d], rem /= sho[d];
        for (int64_t i = 0; i < p.n; i++)
            for (int64_t j = 0; j < p.k; j++) {
                int64_t v = view_offset(nda, sha, sta, nb, bi, i, j, a1, false);
                if (b * p.sa + blas_read(p.ta, p.lda, i, j) != v) *checked_ok = false;
            }
        for (int64_t i = 0; i < p.k; i++)
            for (int64_t j = 0; j < p.m; j++) {
                int64_t v = view_offset(ndb, shb, stb, nb, bi, i, j, b1, true);
                if (b * p.sb + blas_read(p.tb, p.ldb, i, j) != v) *checked_ok = false;
            }
        for (int64_t i = 0; i < p.n; i++) /* out: column-major O^T with ld m, batch stride n m */
            for (int64_t j = 0; j < p.m; j++) {
                int64_t v = 0, idx[10], nidx = 0;
                for (int d = 0; d < nb; d++) idx[nidx++] = bi[d];
                if (!a1) idx[nidx++] = i;
                if (!b1) idx[nidx++] = j;
                for (int d = 0; d < ndo; d++) v += idx[d] * sto[d];
                if (b * p.n * p.m + j + i * p.m != v) *checked_ok = false;
            }
    }
    return true;
}

static void test_batched_plans(void) {
    static const int64_t batches[][3] = {{0}, {1, 3}, {1, 1}, {2, 2, 3}, {2, 1, 3}, {2, 2, 1}, {2, 1, 1}};
    int accepted = 0, refused = 0, cases = 0;
    for (size_t x = 0; x < sizeof batches / sizeof *batches; x++)
        for (size_t y = 0; y < sizeof batches / sizeof *batches; y++)
            for (int ka = 0; ka < 16; ka++)
                for (int kb = 0; kb < 16; kb++)
                    for (int vec = 0; vec < 3; vec++) {
                        bool a1 = vec == 1, b1 = vec == 2, checked;
                        if ((a1 && (batches[x][0] || ka >= 4)) || (b1 && (batches[y][0] || kb >= 4))) continue;
                        int nba = (int)batches[x][0], nbb = (int)batches[y][0];
                        bool ok = plan_case(nba, batches[x] + 1, ka, a1, nbb, batches[y] + 1, kb, b1, 3, 4, 5, &checked);
                        cases++;
                        if (!checked) fprintf(stderr, "plan reads elsewhere: a kind %d batch %zu, b kind %d batch %zu, vec %d\n",
                                              ka, x, kb, y, vec);
                        CHECK(checked);
                        /* an expanded matrix dim is always refused */
                        if (((ka & T_EXPAND) && !a1) || ((kb & T_EXPAND) && !b1)) CHECK(!ok);
                        /* plain, transposed or padded matrices with batch dims in memory order are accepted */
                        bool plain = !a1 ? !(ka & (T_EXPAND | T_REVERSE)) : 1;
                        plain = plain && (!b1 ? !(kb & (T_EXPAND | T_REVERSE)) : 1);
                        if (plain && (nba == 0 || nbb == 0 || a1 || b1) && !ok)
                            fprintf(stderr, "refused: a kind %d batch %zu, b kind %d batch %zu, vec %d\n", ka, x, kb, y, vec);
                        if (plain && (nba == 0 || nbb == 0 || a1 || b1)) CHECK(ok);
                        accepted += ok, refused += !ok;
                    }
    CHECK(cases > 1000 && accepted > 300 && refused > 300);
    /* named cases: [2, 3, 4, 5] @ [5, 6] (one B for every batch: stride 0) */
    int64_t sa4[4] = {60, 20, 5, 1}, sb2[2] = {6, 1}, so[4] = {72, 24, 6, 1};
    oar_cuda_gemm_plan p;
    CHECK(oar_cuda_gemm_plan_make(4, (int64_t[]){2, 3, 4, 5}, sa4, 2, (int64_t[]){5, 6}, sb2, 4,
                                  (int64_t[]){2, 3, 4, 6}, so, &p));
    CHECK(p.batch == 6 && p.sa == 20 && p.sb == 0 && p.n == 4 && p.k == 5 && p.m == 6);
    /* the same into a transposed (not dense) output: refused */
    CHECK(!oar_cuda_gemm_plan_make(4, (int64_t[]){2, 3, 4, 5}, sa4, 2, (int64_t[]){5, 6}, sb2, 4,
                                   (int64_t[]){2, 3, 4, 6}, (int64_t[]){72, 24, 1, 4}, &p));
    /* mismatched inner dims, batch dims that do not broadcast, rank past 8 */
    CHECK(!oar_cuda_gemm_plan_inputs(2, (int64_t[]){4, 5}, (int64_t[]){5, 1}, 2, (int64_t[]){4, 6}, (int64_t[]){6, 1}, &p));
    CHECK(!oar_cuda_gemm_plan_inputs(3, (int64_t[]){2, 4, 5}, (int64_t[]){20, 5, 1}, 3, (int64_t[]){3, 5, 6},
                                     (int64_t[]){30, 6, 1}, &p));
    int64_t big[9] = {1, 1, 1, 1, 1, 1, 1, 4, 5}, bigst[9] = {20, 20, 20, 20, 20, 20, 20, 5, 1};
    CHECK(!oar_cuda_gemm_plan_inputs(9, big, bigst, 2, (int64_t[]){5, 6}, sb2, &p));
    /* a batch stride cuBLAS cannot step: the batch dims in reverse order */
    CHECK(!oar_cuda_gemm_plan_inputs(4, (int64_t[]){2, 3, 4, 5}, (int64_t[]){20, 40, 5, 1}, 2, (int64_t[]){5, 6}, sb2, &p));
    /* 1-D @ 1-D: a dot product, batch 1 */
    CHECK(oar_cuda_gemm_plan_inputs(1, (int64_t[]){7}, (int64_t[]){1}, 1, (int64_t[]){7}, (int64_t[]){2}, &p));
    CHECK(p.n == 1 && p.m == 1 && p.k == 7 && p.batch == 1);
}

int main(void) {
    RUN(test_cases);
    RUN(test_exhaustive);
    RUN(test_batched_plans);
    return test_summary();
}
