/* The predictor: loads a saved model, optimises it, reports names and
 * shapes, runs with caller-owned or predictor-owned buffers, clones, and
 * serves 8 threads calling run at once with correct results. */
#include "graph/graph_test_util.h"

#include <oar/infer.h>
#include <pthread.h>
#include <unistd.h>

static char dir[] = "/tmp/oar_pred_XXXXXX";
static oar_module *net;

#define N_THREADS 8
#define N_RUNS 25

typedef struct job {
    oar_predictor *p;
    oar_tensor *x[N_RUNS], *want[N_RUNS];
    int bad;
} job;

/* Max |a - b| of two contiguous f32 CPU tensors of equal numel, without
 * pools (a worker thread's pools outlive it: core keeps them per thread). */
static double diff_f32(oar_tensor *a, oar_tensor *b) {
    if (!a || !b || oar_tensor_numel(a) != oar_tensor_numel(b)) return INFINITY;
    const float *x = oar_tensor_data(a), *y = oar_tensor_data(b);
    double m = 0;
    for (int64_t i = 0; i < oar_tensor_numel(a); i++) m = fmax(m, fabs((double)x[i] - y[i]));
    return m;
}

static void *worker(void *arg) {
    job *j = arg;
    for (int r = 0; r < N_RUNS; r++) {
        oar_tensor *y = NULL;
        if (oar_predictor_run(j->p, &j->x[r], &y) || diff_f32(y, j->want[r]) > 1e-5) j->bad++;
        oar_tensor_release(y);
    }
    return NULL;
}

static void test_basics(void) {
    oar_predictor_config cfg = {.model_dir = dir, .optimize = true, .num_threads = 1};
    oar_predictor *p = oar_predictor_create(&cfg);
    CHECK(p != NULL);
    CHECK(oar_predictor_num_inputs(p) == 1 && oar_predictor_num_outputs(p) == 1);
    CHECK(strcmp(oar_predictor_input_name(p, 0), "x") == 0);
    CHECK(strcmp(oar_predictor_output_name(p, 0), "y") == 0);
    CHECK(oar_predictor_output_name(p, 1) == NULL && oar_predictor_output_name(p, -1) == NULL);
    CHECK(oar_predictor_input_name(p, 1) == NULL && oar_predictor_output_name(NULL, 0) == NULL);
    CHECK(oar_predictor_output_index(p, "y") == 0 && oar_predictor_input_index(p, "nope") == -1);
    int64_t shape[8];
    oar_dtype dt;
    CHECK(oar_predictor_input_shape(p, 0, &dt, shape) == 4 && shape[0] == -1 && shape[1] == 1 && dt == OAR_F32);
    CHECK(oar_predictor_output_shape(p, 0, &dt, shape) == 2 && shape[0] == -1 && shape[1] == 3);
    CHECK(oar_graph_count_op(oar_predictor_graph(p), "batch_norm") == 0);
    oar_pool *pool = oar_pool_push();
    oar_tensor *x = oar_randn(OAR_F32, 4, (int64_t[]){3, 1, 8, 8});
    oar_tensor *want = oar_module_forward(net, x);
    /* predictor-allocated output (caller owns it) */
    oar_tensor *y = NULL;
    CHECK(oar_predictor_run(p, &x, &y) == 0);
    CHECK_NEAR(max_diff(y, want), 0, 1e-5);
    oar_tensor_release(y);
    /* caller-owned buffer */
    oar_tensor *buf = oar_zeros(OAR_F32, 2, (int64_t[]){3, 3});
    CHECK(oar_predictor_run(p, &x, &buf) == 0);
    CHECK_NEAR(max_diff(buf, want), 0, 1e-5);
    oar_tensor *wrong = oar_zeros(OAR_F32, 2, (int64_t[]){2, 3});
    CHECK_STATUS_FAILS(oar_predictor_run(p, &x, &wrong), "buffer given is float32 [2, 3]");
    /* predictor-owned (zero copy) */
    oar_tensor *b = NULL;
    CHECK(oar_predictor_run_borrowed(p, &x, &b) == 0);
    CHECK_NEAR(max_diff(b, want), 0, 1e-5);
    /* a clone shares the model */
    oar_predictor *c = oar_predictor_clone(p);
    CHECK(c && oar_predictor_graph(c) == oar_predictor_graph(p));
    oar_predictor_free(p);
    y = NULL;
    CHECK(oar_predictor_run(c, &x, &y) == 0);
    CHECK_NEAR(max_diff(y, want), 0, 1e-5);
    oar_tensor_release(y);
    /* bad input: the error names the input and both shapes */
    oar_tensor *bad = oar_zeros(OAR_F32, 4, (int64_t[]){3, 2, 8, 8});
    y = NULL;
    CHECK_STATUS_FAILS(oar_predictor_run(c, &bad, &y), "input 0 (x) is float32 [3, 2, 8, 8]");
    CHECK(y == NULL);
    oar_predictor_free(c);
    oar_pool_pop(pool);
    CHECK_FAILS(oar_predictor_create(&(oar_predictor_config){.model_dir = "/nonexistent"}), "cannot open");
    CHECK_FAILS(oar_predictor_create(NULL), "NULL");
    /* an explicit pass list */
    oar_predictor *q = oar_predictor_create(&(oar_predictor_config){.model_dir = dir, .passes = "fold_batch_norm,dce"});
    CHECK(q && oar_graph_count_op(oar_predictor_graph(q), "batch_norm") == 0);
    oar_predictor_free(q);
    q = oar_predictor_create(&(oar_predictor_config){.model_dir = dir});
    CHECK(q && oar_graph_count_op(oar_predictor_graph(q), "batch_norm") == 1); /* no passes */
    oar_predictor_free(q);
    CHECK_FAILS(oar_predictor_create(&(oar_predictor_config){.model_dir = dir, .passes = "dce,,cse"}), "bad pass list");
    CHECK_FAILS(oar_predictor_create(&(oar_predictor_config){.model_dir = dir, .passes = "fuse"}), "unknown pass");
}

static void test_threads(void) {
    oar_predictor_config cfg = {.model_dir = dir, .optimize = true, .num_threads = 1};
    oar_predictor *p = oar_predictor_create(&cfg);
    CHECK(p != NULL);
    static job jobs[N_THREADS];
    oar_predictor *clones[N_THREADS] = {0};
    for (int t = 0; t < N_THREADS; t++) {
        /* half the threads share p, half use clones; batch sizes vary */
        jobs[t].p = t % 2 ? p : (clones[t] = oar_predictor_clone(p));
        jobs[t].bad = 0;
        for (int r = 0; r < N_RUNS; r++) {
            jobs[t].x[r] = oar_randn(OAR_F32, 4, (int64_t[]){1 + (t + r) % 4, 1, 8, 8});
            jobs[t].want[r] = oar_module_forward(net, jobs[t].x[r]);
        }
    }
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) pthread_create(&th[t], NULL, worker, &jobs[t]);
    int bad = 0;
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        bad += jobs[t].bad;
    }
    CHECK(bad == 0);
    for (int t = 0; t < N_THREADS; t++) {
        for (int r = 0; r < N_RUNS; r++) {
            oar_tensor_release(jobs[t].x[r]);
            oar_tensor_release(jobs[t].want[r]);
        }
        oar_predictor_free(clones[t]);
    }
    oar_predictor_free(p);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    net = make_cnn();
    oar_graph_input_spec s = {.name = "x", .dtype = OAR_F32, .ndim = 4, .shape = {-1, 1, 8, 8}, .dim_names = {"N"}};
    oar_graph *g = oar_trace_module(net, &s);
    if (!g || oar_graph_save(g, dir)) return 1;
    oar_graph_free(g);
    RUN(test_basics);
    RUN(test_threads);
    oar_module_free(net);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) return 1;
    return test_summary();
}
