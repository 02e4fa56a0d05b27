/* ONNX import, TfIdfVectorizer over integer tokens: each pool n-gram's
 * count, for every skip distance, as a sum of elementwise matches of
 * shifted slices of the input (strings are refused: oar has no string
 * dtype). Unigrams count once, whatever the skip. */
#define OARI_ONNX_PROTO
#include "onnx_internal.h"
#include <string.h>

#define MAX_SLOTS 4096

int oari_onnx_conv_tfidf(oari_onnx_node *nd) {
    int st = oari_onnx_need(nd, 1);
    if (st) return st;
    oar_tensor *x = nd->in[0];
    int r = oar_tensor_ndim(x);
    if (r < 1 || r > 2 || oar_dtype_is_float(oar_tensor_dtype(x)))
        return oari_error(OAR_ERR_UNSUPPORTED, "only 1-D or 2-D integer input is supported");
    const Onnx__AttributeProto *pool = oari_onnx_attr(nd, "pool_int64s"), *counts = oari_onnx_attr(nd, "ngram_counts");
    const Onnx__AttributeProto *idx = oari_onnx_attr(nd, "ngram_indexes"), *wts = oari_onnx_attr(nd, "weights");
    if (!pool) return oari_error(OAR_ERR_UNSUPPORTED, "pool_strings is not supported (pool_int64s only)");
    if (!counts || !idx) return oari_error(OAR_ERR_INVALID, "ngram_counts and ngram_indexes are required");
    int64_t lo = oari_onnx_attr_i(nd, "min_gram_length", 1), hi = oari_onnx_attr_i(nd, "max_gram_length", 1);
    int64_t skip = oari_onnx_attr_i(nd, "max_skip_count", 0);
    int mode = oari_onnx_attr_s_is(nd, "mode", "", "TF") ? 0 : oari_onnx_attr_s_is(nd, "mode", "", "IDF") ? 1
             : oari_onnx_attr_s_is(nd, "mode", "", "TFIDF") ? 2 : -1;
    if (mode < 0 || lo < 1 || hi < lo || skip < 0 || skip > 64) return oari_error(OAR_ERR_INVALID, "bad mode or gram lengths");
    int64_t slots = 0;
    for (size_t g = 0; g < idx->n_ints; g++) {
        if (idx->ints[g] < 0 || idx->ints[g] >= MAX_SLOTS) return oari_error(OAR_ERR_INVALID, "ngram_indexes out of range");
        if (idx->ints[g] + 1 > slots) slots = idx->ints[g] + 1;
    }
    if (wts && wts->n_floats != idx->n_ints) return oari_error(OAR_ERR_INVALID, "weights and ngram_indexes differ in length");
    oar_tensor *x2 = r == 1 ? oar_unsqueeze(x, 0) : x;
    int64_t B = oar_tensor_shape(x2)[0], N = oar_tensor_shape(x2)[1];
    oar_dtype dt = oar_tensor_dtype(x);
    oar_tensor *slot[MAX_SLOTS] = {NULL};
    size_t g = 0; /* n-gram number, in pool order */
    for (size_t c = 0; c < counts->n_ints; c++) {
        int64_t n = (int64_t)c + 1, start = counts->ints[c];
        int64_t end = c + 1 < counts->n_ints ? counts->ints[c + 1] : (int64_t)pool->n_ints;
        if (start < 0 || end < start || end > (int64_t)pool->n_ints || (end - start) % n)
            return oari_error(OAR_ERR_INVALID, "ngram_counts do not split the pool");
        for (int64_t p = start; p < end; p += n, g++) {
            if (g >= idx->n_ints) return oari_error(OAR_ERR_INVALID, "more n-grams than ngram_indexes");
            if (n < lo || n > hi) continue;
            oar_tensor *cnt = NULL;
            for (int64_t d = 1; d <= (n == 1 ? 1 : skip + 1); d++) {
                int64_t span = (n - 1) * d;
                if (span >= N) break;
                oar_tensor *m = NULL;
                for (int64_t j = 0; j < n; j++) {
                    oar_tensor *e = oar_eq(oar_slice(x2, 1, j * d, j * d + N - span, 1), oari_onnx_scalar((double)pool->ints[p + j], dt));
                    m = m ? oar_logical_and(m, e) : e;
                }
                oar_tensor *k = oar_sum(oar_cast(m, OAR_F32), 1, (int64_t[]){1}, false);
                cnt = cnt ? oar_add(cnt, k) : k;
            }
            if (!cnt) continue;
            double w = wts ? wts->floats[g] : 1.0;
            if (mode == 1) cnt = oar_mul_scalar(oar_clamp(cnt, 0, 1), w);
            else if (mode == 2) cnt = oar_mul_scalar(cnt, w);
            int64_t s = idx->ints[g];
            slot[s] = slot[s] ? oar_add(slot[s], cnt) : cnt;
            if (!slot[s]) return OAR_ERR_INVALID;
        }
    }
    oar_tensor *zero = oar_zeros(OAR_F32, 1, &B);
    for (int64_t s = 0; s < slots; s++)
        if (!slot[s]) slot[s] = zero;
    oar_tensor *y = slots ? oar_stack((int)slots, slot, 1) : oar_zeros(OAR_F32, 2, (int64_t[]){B, 0});
    nd->out[0] = r == 1 && y ? oar_squeeze(y, 0) : y;
    return nd->out[0] ? 0 : OAR_ERR_INVALID;
}
