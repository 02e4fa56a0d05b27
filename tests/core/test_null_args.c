/* Every public accessor given a NULL object (or an index out of range)
 * says so in oar_last_error, naming itself, and returns its documented
 * "none" value; a NULL that a failed call made keeps that call's message. */
#include "test.h"

#include <oar/data.h>
#include <oar/dist.h>
#include <oar/graph.h>
#include <oar/infer.h>
#include <oar/io.h>
#include <oar/lbfgs.h>
#include <oar/nn.h>
#include <oar/optim.h>

/* The call must set a message that names `fn` and `needle`. */
#define NAMES(call, fn, needle)                                                          \
    do {                                                                                 \
        oar_clear_error();                                                               \
        call;                                                                            \
        const char *m_ = oar_last_error();                                               \
        if (strstr(m_, fn) && strstr(m_, needle)) test_passed++;                         \
        else {                                                                           \
            test_failed++;                                                               \
            fprintf(stderr, "%s:%d: %s set \"%s\"\n", __FILE__, __LINE__, #call, m_);    \
        }                                                                                \
    } while (0)
#define NULL_ARG(call, fn) NAMES(call, fn, "is NULL")

static void test_null_objects(void) {
    NULL_ARG(CHECK(oar_tensor_ndim(NULL) == -1), "oar_tensor_ndim");
    NULL_ARG(CHECK(oar_tensor_shape(NULL) == NULL), "oar_tensor_shape");
    NULL_ARG(CHECK(oar_tensor_strides(NULL) == NULL), "oar_tensor_strides");
    NULL_ARG(CHECK(oar_tensor_offset(NULL) == -1), "oar_tensor_offset");
    NULL_ARG(CHECK(oar_tensor_numel(NULL) == -1), "oar_tensor_numel");
    NULL_ARG(CHECK(oar_tensor_dtype(NULL) == OAR_DTYPE_INVALID), "oar_tensor_dtype");
    NULL_ARG(CHECK(oar_tensor_device(NULL) == NULL), "oar_tensor_device");
    NULL_ARG(CHECK(!oar_tensor_is_contiguous(NULL)), "oar_tensor_is_contiguous");
    NULL_ARG(CHECK(!oar_tensor_shares_storage(NULL, NULL)), "oar_tensor_shares_storage");
    NULL_ARG(CHECK(!oar_tensor_requires_grad(NULL)), "oar_tensor_requires_grad");
    NULL_ARG(CHECK(!oar_tensor_is_leaf(NULL)), "oar_tensor_is_leaf");
    NULL_ARG(CHECK(oar_tensor_grad(NULL) == NULL), "oar_tensor_grad");
    NULL_ARG(CHECK(!oar_tensor_is_dist(NULL)), "oar_tensor_is_dist");
    NULL_ARG(CHECK(!strcmp(oar_device_name(NULL), "(null)")), "oar_device_name");
    NULL_ARG(oar_memory_stats_get(NULL), "oar_memory_stats_get");
    NULL_ARG(CHECK(oar_mesh_ndim(NULL) == 0), "oar_mesh_ndim");
    NULL_ARG(CHECK(oar_mesh_shape(NULL) == NULL), "oar_mesh_shape");
    NULL_ARG(CHECK(oar_mesh_dim_name(NULL, 0) == NULL), "oar_mesh_dim_name");
    NULL_ARG(CHECK(oar_mesh_coord(NULL, 0) == -1), "oar_mesh_coord");
    NULL_ARG(CHECK(oar_graph_num_nodes(NULL) == -1), "oar_graph_num_nodes");
    NULL_ARG(CHECK(oar_graph_num_inputs(NULL) == -1), "oar_graph_num_inputs");
    NULL_ARG(CHECK(oar_graph_num_outputs(NULL) == -1), "oar_graph_num_outputs");
    NULL_ARG(CHECK(oar_graph_num_constants(NULL) == -1), "oar_graph_num_constants");
    NULL_ARG(CHECK(oar_graph_input_name(NULL, 0) == NULL), "oar_graph_input_name");
    NULL_ARG(CHECK(oar_graph_output_name(NULL, 0) == NULL), "oar_graph_output_name");
    NULL_ARG(CHECK(oar_executor_planned_bytes(NULL) == -1), "oar_executor_planned_bytes");
    NULL_ARG(CHECK(oar_executor_unplanned_bytes(NULL) == -1), "oar_executor_unplanned_bytes");
    NULL_ARG(CHECK(oar_executor_num_plans(NULL) == -1), "oar_executor_num_plans");
    NULL_ARG(CHECK(!oar_executor_is_compiled(NULL)), "oar_executor_is_compiled");
    NULL_ARG(CHECK(oar_predictor_graph(NULL) == NULL), "oar_predictor_graph");
    NULL_ARG(CHECK(!oar_predictor_is_compiled(NULL)), "oar_predictor_is_compiled");
    NULL_ARG(CHECK(oar_predictor_num_inputs(NULL) == -1), "oar_predictor_num_inputs");
    NULL_ARG(CHECK(oar_predictor_num_outputs(NULL) == -1), "oar_predictor_num_outputs");
    NULL_ARG(CHECK(oar_predictor_input_name(NULL, 0) == NULL), "oar_predictor_input_name");
    NULL_ARG(CHECK(oar_predictor_output_name(NULL, 0) == NULL), "oar_predictor_output_name");
    NULL_ARG(CHECK(oar_predictor_input_shape(NULL, 0, NULL, NULL) == -1), "oar_predictor_input_shape");
    NULL_ARG(CHECK(oar_predictor_output_shape(NULL, 0, NULL, NULL) == -1), "oar_predictor_output_shape");
    NULL_ARG(CHECK(oar_module_type(NULL) == NULL), "oar_module_type");
    NULL_ARG(CHECK(oar_module_ctx(NULL) == NULL), "oar_module_ctx");
    NULL_ARG(CHECK(!oar_module_is_training(NULL)), "oar_module_is_training");
    NULL_ARG(CHECK(oar_module_num_children(NULL) == -1), "oar_module_num_children");
    NULL_ARG(oar_module_train(NULL, true), "oar_module_train");
    NULL_ARG(CHECK(oar_dist_reducer_overlapped(NULL) == 0), "oar_dist_reducer_overlapped");
    NULL_ARG(CHECK(isnan(oar_optim_lr(NULL))), "oar_optim_lr");
    NULL_ARG(CHECK(oar_optim_steps(NULL) == -1), "oar_optim_steps");
    NULL_ARG(oar_optim_zero_grad(NULL), "oar_optim_zero_grad");
    NULL_ARG(CHECK(oar_lr_scheduler_epoch(NULL) == -1), "oar_lr_scheduler_epoch");
    NULL_ARG(CHECK(isnan(oar_lr_scheduler_lr(NULL))), "oar_lr_scheduler_lr");
    NULL_ARG(CHECK(oar_lbfgs_evals(NULL) == -1), "oar_lbfgs_evals");
    NULL_ARG(CHECK(oar_dataset_size(NULL) == -1), "oar_dataset_size");
    NULL_ARG(CHECK(oar_dataset_x(NULL) == NULL), "oar_dataset_x");
    NULL_ARG(CHECK(oar_dataset_y(NULL) == NULL), "oar_dataset_y");
    NULL_ARG(CHECK(oar_loader_epoch(NULL) == -1), "oar_loader_epoch");
    NULL_ARG(CHECK(oar_loader_num_batches(NULL) == -1), "oar_loader_num_batches");
    NULL_ARG(CHECK(oar_loader_index(NULL, 0) == -1), "oar_loader_index");
    NULL_ARG(CHECK(oar_tensor_dict_size(NULL) == -1), "oar_tensor_dict_size");
    NULL_ARG(CHECK(oar_tensor_dict_name(NULL, 0) == NULL), "oar_tensor_dict_name");
    NULL_ARG(CHECK(oar_tensor_dict_tensor(NULL, 0) == NULL), "oar_tensor_dict_tensor");
}

static oar_tensor *twice(void *ctx, int n, oar_tensor *const *in) {
    (void)ctx, (void)n;
    return oar_mul_scalar(in[0], 2);
}

static int twice_fn(void *ctx, oar_tensor *const *in, oar_tensor **out) {
    out[0] = twice(ctx, 1, in);
    return out[0] ? 0 : -1;
}

/* Indexes out of range say so, with the range. */
static void test_out_of_range(void) {
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 1, .shape = {3}};
    oar_graph *g = oar_trace(twice_fn, NULL, 1, &s, 1, NULL);
    CHECK(g != NULL);
    NAMES(CHECK(oar_graph_input_name(g, 1) == NULL), "oar_graph_input_name", "out of range [0, 1)");
    NAMES(CHECK(oar_graph_output_name(g, -1) == NULL), "oar_graph_output_name", "out of range [0, 1)");
    CHECK(!strcmp(oar_graph_input_name(g, 0), "x"));
    oar_graph_free(g);
}

/* A NULL made by a failed call keeps that call's message. */
static void test_first_message_kept(void) {
    oar_clear_error();
    oar_tensor *t = oar_exp(NULL); /* "exp: input 0 is NULL" */
    char first[256];
    snprintf(first, sizeof first, "%s", oar_last_error());
    CHECK(first[0] != 0);
    CHECK(oar_tensor_ndim(t) == -1);
    CHECK(!strcmp(oar_last_error(), first));
}

int main(void) {
    RUN(test_null_objects);
    RUN(test_out_of_range);
    RUN(test_first_message_kept);
    return test_summary();
}
