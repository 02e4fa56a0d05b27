/* The per-op sharding decisions: for every op of the registry, the rule of
 * rules.c it follows or why it replicates. The one place these are
 * decided: oari_shard_rule switches on it, docs/dist_rules.md is generated
 * from it (oari_dist_rules_doc, written by tests/dist/test_dist_rules.c
 * --write), and that test fails on an op with no decision.
 *
 * Ops of the elementwise and broadcast fusion kinds (the rows of
 * src/ops/elementwise.def and a few more) take the pointwise rule without
 * a row here; every other op has a row. */
#include "dist.h"

#include <stdio.h>
#include <string.h>

#define ROW(op, ...) [OARI_OP_##op] = {__VA_ARGS__}
#define LIN(i) (1u << (i))

static const oari_dist_rule table[OARI_OP_COUNT] = {
    /* reductions */
    ROW(sum, OARI_RULE_REDUCE, 0, LIN(0), false, "a reduced sharded dim gives Partial(sum)"),
    ROW(prod, OARI_RULE_REDUCE, 0, 0, false, "a reduced sharded dim gives Partial(prod)"),
    ROW(amax, OARI_RULE_REDUCE, 0, 0, false, "a reduced sharded dim gives Partial(max)"),
    ROW(amin, OARI_RULE_REDUCE, 0, 0, false, "a reduced sharded dim gives Partial(min)"),
    ROW(all, OARI_RULE_REDUCE, 0, 0, false, "kept dims only (a reduced sharded dim is gathered)"),
    ROW(any, OARI_RULE_REDUCE, 0, 0, false, "kept dims only (a reduced sharded dim is gathered)"),
    ROW(argmax, OARI_RULE_ARGREDUCE, 0, 0, false, NULL),
    ROW(argmin, OARI_RULE_ARGREDUCE, 0, 0, false, NULL),
    ROW(cumsum, OARI_RULE_ALONG, 0, LIN(0), false, NULL),
    ROW(cumprod, OARI_RULE_ALONG, 0, 0, false, NULL),
    ROW(size_of, OARI_RULE_REPLICATE, 0, 0, false, "reads global sizes only; its 0-d result is replicated"),
    /* softmax-like */
    ROW(softmax, OARI_RULE_ALONG, 0, 0, true, "along a sharded dim: max and sum of exp all-reduced (rules_vocab.c)"),
    ROW(log_softmax, OARI_RULE_ALONG, 0, 0, true, "along a sharded dim: max and sum of exp all-reduced (rules_vocab.c)"),
    ROW(layer_norm, OARI_RULE_LAYER_NORM, 0, 0, false, NULL),
    ROW(group_norm, OARI_RULE_GROUP_NORM, 0, 0, false, NULL),
    ROW(batch_norm, OARI_RULE_REPLICATE, 0, 0, false,
        "batch statistics span the batch (a synchronized batch norm is not done)"),
    /* linear algebra */
    ROW(matmul, OARI_RULE_MATMUL, 0, 0, false, NULL),
    ROW(linalg_solve, OARI_RULE_LEADING, 0, 0, false, NULL),
    ROW(linalg_slogdet, OARI_RULE_LEADING, 0, 0, false, NULL),
    ROW(linalg_cholesky, OARI_RULE_LEADING, 0, 0, false, NULL),
    ROW(linalg_eigh, OARI_RULE_LEADING, 0, 0, false, NULL),
    ROW(linalg_qr, OARI_RULE_LEADING, 0, 0, false, NULL),
    ROW(linalg_svd, OARI_RULE_LEADING, 0, 0, false, NULL),
    ROW(tril, OARI_RULE_LEADING, 0, LIN(0), false, NULL),
    ROW(triu, OARI_RULE_LEADING, 0, LIN(0), false, NULL),
    /* movement */
    ROW(view, OARI_RULE_MOVEMENT, 0, LIN(0), false, NULL),
    ROW(permute, OARI_RULE_MOVEMENT, 0, LIN(0), false, NULL),
    ROW(expand, OARI_RULE_MOVEMENT, 0, LIN(0), false, NULL),
    ROW(slice, OARI_RULE_MOVEMENT, 0, LIN(0), false, NULL),
    ROW(slice_backward, OARI_RULE_MOVEMENT, 0, LIN(0), false, NULL),
    ROW(diagonal, OARI_RULE_REPLICATE, 0, 0, false, "not done: the dims around the diagonal renumber"),
    ROW(diagonal_backward, OARI_RULE_REPLICATE, 0, 0, false, "not done (diagonal's gradient)"),
    ROW(concat, OARI_RULE_ALONG, 0, ~0u, false, "every input sharded alike on a dim other than the concat dim"),
    ROW(pad, OARI_RULE_PAD, 0, 0, false, NULL),
    ROW(pad_backward, OARI_RULE_PAD, 0, LIN(0), false, NULL),
    ROW(flip, OARI_RULE_FLIP, 0, LIN(0), false, NULL),
    ROW(roll, OARI_RULE_ROLL, 0, LIN(0), false, NULL),
    ROW(contiguous, OARI_RULE_ALL_DIMS, 0, LIN(0), false, NULL),
    ROW(view_as_real, OARI_RULE_ALL_DIMS, 0, LIN(0), false, NULL),
    ROW(view_as_complex, OARI_RULE_LAST_FREE, 0, LIN(0), false, NULL),
    /* indexing, sorting */
    ROW(gather, OARI_RULE_ALONG, 0, LIN(0), true,
        "x and index sharded alike off the dim; x sharded on the dim: masked local pick, Partial(sum) (rules_vocab.c)"),
    ROW(scatter, OARI_RULE_ALONG, 0, 0, false, "x, index and src sharded alike off the dim"),
    ROW(scatter_add, OARI_RULE_ALONG, 0, LIN(0) | LIN(2), false, "x, index and src sharded alike off the dim"),
    ROW(index_select, OARI_RULE_INDEX_SELECT, 0, LIN(0), true,
        "a sharded index gives sharded rows; a table sharded on the picked dim: vocab-parallel (rules_vocab.c)"),
    ROW(index_add, OARI_RULE_ALONG, 0, LIN(0) | LIN(2), false, "x and src sharded alike off the dim"),
    ROW(one_hot, OARI_RULE_ALL_DIMS, 0, 0, false, NULL),
    ROW(sort, OARI_RULE_ALONG, 0, 0, false, NULL),
    ROW(topk, OARI_RULE_ALONG, 1, 0, false, NULL),
    /* convolution, pooling */
    ROW(conv2d, OARI_RULE_CONV, 0, 0, false, NULL),
    ROW(conv_transpose2d, OARI_RULE_CONV, 0, 0, false, NULL),
    ROW(conv2d_weight_grad, OARI_RULE_CONV, 0, 0, false, NULL),
    ROW(conv2d_prepacked, OARI_RULE_REPLICATE, 0, 0, false, "not done: the predictor's op on a packed weight"),
    ROW(conv3d, OARI_RULE_CONV, 0, 0, false, NULL),
    ROW(conv_transpose3d, OARI_RULE_CONV, 0, 0, false, NULL),
    ROW(conv3d_weight_grad, OARI_RULE_CONV, 0, 0, false, NULL),
    ROW(max_pool2d, OARI_RULE_SPATIAL, 0, 0, false, NULL),
    ROW(max_pool2d_values, OARI_RULE_REPLICATE, 0, 0, false, "not done: the predictor's op, as conv2d_prepacked"),
    ROW(avg_pool2d, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(adaptive_avg_pool2d, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(interpolate, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(max_pool2d_backward, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(avg_pool2d_backward, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(adaptive_avg_pool2d_backward, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(interpolate_backward, OARI_RULE_SPATIAL, 0, LIN(0), false, NULL),
    ROW(layer_norm_backward, OARI_RULE_LAYER_NORM, 0, 0, false,
        "leading dims stay sharded; the weight and bias gradients are then partial sums"),
    ROW(batch_norm_backward, OARI_RULE_REPLICATE, 0, 0, false,
        "batch statistics span the batch, as batch_norm's"),
    /* Fourier transforms */
    ROW(fft_c2c, OARI_RULE_FFT, 0, LIN(0), false, NULL),
    ROW(fft_r2c, OARI_RULE_FFT, 0, LIN(0), false, NULL),
    ROW(fft_c2r, OARI_RULE_FFT, 0, LIN(0), false, NULL),
    /* in place, random, devices, custom */
    ROW(fill, OARI_RULE_INPLACE, 0, 0, false, "each rank writes its shard"),
    ROW(copy, OARI_RULE_INPLACE, 0, 0, false, "the source resharded to the target's layout; each rank writes its shard"),
    ROW(add_scaled, OARI_RULE_INPLACE, 0, 0, false, "the source resharded to the target's layout; each rank writes its shard"),
    ROW(adam_update, OARI_RULE_ALL_DIMS, 0, 0, false, "p, g, m and v take p's sharded dims (a Partial gradient is reduced first); oar_optim_step runs the composite update on dtensors"),
    ROW(uniform, OARI_RULE_INPLACE, 0, 0, false, "refused on dtensors (random in-place ops are not done)"),
    ROW(normal, OARI_RULE_INPLACE, 0, 0, false, "refused on dtensors (random in-place ops are not done)"),
    ROW(randint, OARI_RULE_INPLACE, 0, 0, false, "refused on dtensors (random in-place ops are not done)"),
    ROW(bernoulli, OARI_RULE_REPLICATE, 0, 0, false,
        "random: run whole on every rank with the call's seed (the ranks agree when they seed alike)"),
    ROW(to_device, OARI_RULE_REPLICATE, 0, 0, false, "moves a whole tensor; a dtensor's shards move with their device"),
    ROW(dist_reshard, OARI_RULE_RESHARD, 0, 0, false, NULL),
    ROW(custom, OARI_RULE_CUSTOM, 0, 0, false, NULL),
    /* recurrent layers, quantization */
    ROW(rnn_layer, OARI_RULE_REPLICATE, 0, 0, false, "not done: the batch is dim 1 of x and dim 0 of the states"),
    ROW(gru_layer_train, OARI_RULE_REPLICATE, 0, 0, false, "as rnn_layer's (oar_rnn_layer takes rnn_layer for dtensors)"),
    ROW(lstm_layer, OARI_RULE_REPLICATE, 0, 0, false, "not done: the batch is dim 1 of x and dim 0 of the states"),
    ROW(lstm_layer_train, OARI_RULE_REPLICATE, 0, 0, false, "as lstm_layer's (oar_rnn_layer takes lstm_layer for dtensors)"),
    ROW(lstm_layer_backward, OARI_RULE_REPLICATE, 0, 0, false, "as lstm_layer's"),
    ROW(quantize, OARI_RULE_REPLICATE, 0, 0, false, "not done: per-channel scales along an axis"),
    ROW(dequantize, OARI_RULE_REPLICATE, 0, 0, false, "not done: per-channel scales along an axis"),
    ROW(fake_quantize, OARI_RULE_REPLICATE, 0, 0, false, "not done: per-channel scales along an axis"),
    ROW(qmatmul, OARI_RULE_REPLICATE, 0, 0, false, "not done: int8 operands with their scales"),
    ROW(qconv2d, OARI_RULE_REPLICATE, 0, 0, false, "not done: int8 operands with their scales"),
    ROW(qlinear, OARI_RULE_REPLICATE, 0, 0, false, "not done: int8 operands with their scales"),
    ROW(qlinear_conv2d, OARI_RULE_REPLICATE, 0, 0, false, "not done: int8 operands with their scales"),
    ROW(qmax_pool2d, OARI_RULE_REPLICATE, 0, 0, false, "not done: as qlinear_conv2d, whose output it pools"),
};

oari_dist_rule oari_dist_rule_of(oari_op op) {
    oari_dist_rule none = {0};
    if ((int)op < 0 || op >= OARI_OP_COUNT) return none;
    if (table[op].kind != OARI_RULE_NONE) return table[op];
    const oari_op_def *def = oari_op_defs[op];
    if (def && (def->fusion == OARI_FUSE_ELEMWISE || def->fusion == OARI_FUSE_BROADCAST) &&
        !(def->flags & (OARI_F_VIEW | OARI_F_INPLACE | OARI_F_RANDOM)) && def->n_out == 1)
        return (oari_dist_rule){.kind = OARI_RULE_POINTWISE};
    return none;
}

static const struct {
    const char *name, *doc;
} kinds[] = {
    [OARI_RULE_NONE] = {"none", "no decision"},
    [OARI_RULE_REPLICATE] = {"replicate", "inputs replicated, run whole on every rank"},
    [OARI_RULE_INPLACE] = {"in-place", "the in-place path of dist_dispatch.c"},
    [OARI_RULE_RESHARD] = {"reshard", "the reshard op itself"},
    [OARI_RULE_POINTWISE] = {"pointwise", "a sharded dim follows through unless broadcast; Partial(sum) "
                                          "through add/sub/neg and products with replicated values"},
    [OARI_RULE_MATMUL] = {"matmul", "rows, columns, batch; a sharded contraction gives Partial(sum)"},
    [OARI_RULE_REDUCE] = {"reduce", "kept sharded dims stay sharded"},
    [OARI_RULE_ARGREDUCE] = {"arg-reduce", "dims other than the reduced one stay sharded"},
    [OARI_RULE_MOVEMENT] = {"dim-transform", "a sharded dim that passes through whole stays sharded"},
    [OARI_RULE_ALONG] = {"along one dim", "dims other than the op's dim stay sharded"},
    [OARI_RULE_LEADING] = {"batch dims", "the leading (batch) dims stay sharded"},
    [OARI_RULE_SPATIAL] = {"batch and channels", "batch and channel dims stay sharded"},
    [OARI_RULE_ALL_DIMS] = {"every dim", "every sharded dim stays sharded"},
    [OARI_RULE_LAST_FREE] = {"all but last", "dims but the last stay sharded"},
    [OARI_RULE_FLIP] = {"unflipped dims", "dims not flipped stay sharded"},
    [OARI_RULE_ROLL] = {"unrolled dims", "dims not rolled stay sharded"},
    [OARI_RULE_PAD] = {"unpadded dims", "dims not padded stay sharded"},
    [OARI_RULE_FFT] = {"untransformed dims", "dims not transformed stay sharded"},
    [OARI_RULE_LAYER_NORM] = {"leading dims", "the dims not normalised stay sharded"},
    [OARI_RULE_GROUP_NORM] = {"batch dim", "the batch dim stays sharded"},
    [OARI_RULE_INDEX_SELECT] = {"index", "a sharded index gives sharded rows; other dims stay sharded"},
    [OARI_RULE_CONV] = {"conv", "batch -> batch; weight's output channels -> output channels; input "
                                "channels of x and weight -> Partial(sum) (no bias, groups 1)"},
    [OARI_RULE_CUSTOM] = {"custom", "elementwise custom ops: pointwise; others replicate"},
};

const char *oari_rule_kind_name(oari_rule_kind k) {
    return (unsigned)k < sizeof kinds / sizeof kinds[0] ? kinds[k].name : "?";
}

const char *oari_rule_kind_doc(oari_rule_kind k) {
    return (unsigned)k < sizeof kinds / sizeof kinds[0] ? kinds[k].doc : "?";
}

int oari_dist_rules_doc(char *buf, size_t n) {
    size_t at = 0;
#define PUT(...)                                                                              \
    do {                                                                                      \
        int w_ = snprintf(buf + at, at < n ? n - at : 0, __VA_ARGS__);                        \
        if (w_ < 0 || (size_t)w_ >= (at < n ? n - at : 0))                                    \
            return oari_error(OAR_ERR_INVALID, "oari_dist_rules_doc: buffer of %zu bytes too small", n); \
        at += (size_t)w_;                                                                     \
    } while (0)
    if (!buf || !n) return oari_error(OAR_ERR_INVALID, "oari_dist_rules_doc: no buffer");
    PUT("# Sharding rules, op by op\n\n"
        "Generated from `src/dist/rules_table.c` by `tests/dist/test_dist_rules --write` (run from\n"
        "`tests/`); `test_dist_rules` fails when this file is not current or an op has no\n"
        "decision. How the rules work: `docs/internals/dist.md`, \"Dispatch and sharding rules\".\n\n"
        "Kinds:\n\n");
    for (int k = OARI_RULE_REPLICATE; k <= OARI_RULE_CUSTOM; k++) PUT("- **%s**: %s\n", kinds[k].name, kinds[k].doc);
    int n_pw = 0;
    PUT("\n| op | rule | note |\n|---|---|---|\n");
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        oari_dist_rule r = oari_dist_rule_of((oari_op)op);
        if (r.kind == OARI_RULE_POINTWISE && table[op].kind == OARI_RULE_NONE) {
            n_pw++;
            continue;
        }
        const char *name = oari_op_name((oari_op)op);
        PUT("| `%s` | %s | %s |\n", name, oari_rule_kind_name(r.kind), r.note ? r.note : "");
    }
    PUT("\nPointwise (elementwise and broadcast fusion kinds), %d ops:", n_pw);
    for (int op = 0; op < OARI_OP_COUNT; op++) {
        if (table[op].kind != OARI_RULE_NONE || oari_dist_rule_of((oari_op)op).kind != OARI_RULE_POINTWISE) continue;
        PUT(" `%s`", oari_op_name((oari_op)op));
    }
    PUT("\n");
#undef PUT
    return 0;
}
