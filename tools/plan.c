/* `oar plan`: the automatic parallel strategy from the command line
 * (include/oar/plan.h, docs/cli.md, docs/internals/plan.md).
 *
 *   oar plan MODEL --devices N [--mem 80G] [--batch B] [--cluster h200|a100] [--per-node K]
 *                  [--calib FILE] [--runnable-only] [--runners-up K]
 *   oar plan --calibrate FILE       (under mpirun for the collectives' figures)
 *
 * MODEL is a saved-model folder (its graph's layers, read at the batch it
 * was traced with) or a transformer description gpt:LAYERS,D,HEADS,SEQ,VOCAB. */
#include "cli.h"

#include <oar/oar.h>
#include <oar/plan.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_plan_help[] =
    "usage: oar plan MODEL --devices N [--mem SIZE] [--batch B] [--cluster h200|a100] [--per-node K]\n"
    "                 [--calib FILE] [--runnable-only] [--runners-up K]\n"
    "       oar plan --calibrate FILE\n"
    "\n"
    "Chooses how to parallelize MODEL over N devices: data, tensor, pipeline and ZeRO degrees,\n"
    "micro-batches, recompute and per-layer placements, by oar's cost model. Prints the chosen\n"
    "plan, the runners-up (each with predicted step time and memory per rank) and why each\n"
    "pruned family was pruned.\n"
    "\n"
    "  MODEL            a saved-model folder (its traced forward graph), or\n"
    "                   gpt:LAYERS,D_MODEL,HEADS,SEQ,VOCAB (a GPT-style transformer)\n"
    "  --devices N      devices in all\n"
    "  --mem SIZE       memory per device: 80G, 141G (K, M, G, T: powers of 1024; GB, TB: of 1000)\n"
    "  --batch B        global batch in samples (default: 8 x devices)\n"
    "  --cluster KIND   rates of h200 (the default) or a100 devices, 8 a node\n"
    "  --per-node K     devices per node\n"
    "  --calib FILE     rates measured on this machine (written by --calibrate); one node\n"
    "  --runnable-only  only what oar runs today (ZeRO 1/2 only with dp alone)\n"
    "  --runners-up K   runners-up to list (default 5)\n"
    "  --calibrate FILE measures oar's kernels (and, under mpirun, its all-reduce) and writes FILE\n"
    "\n"
    "examples:\n"
    "  oar plan gpt:96,12288,96,2048,51200 --devices 1024 --mem 141G --batch 1536\n"
    "  mpirun -np 2 oar plan --calibrate here.json && oar plan demo-out/mlp --devices 4 --calib here.json\n"
    "\n"
    "exit status: 0 success; 1 failure (no plan fits, a file that cannot be read); 2 usage error\n";

static int parse_int(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return cli_usage_error("plan", opt, "expected an integer in %lld..%lld, got '%s'", lo, hi, v);
    *out = x;
    return 0;
}

static int parse_size(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double mul = 1;
    if (!strcmp(end, "K")) mul = 1024.0;
    else if (!strcmp(end, "M")) mul = 1024.0 * 1024;
    else if (!strcmp(end, "G")) mul = 1024.0 * 1024 * 1024;
    else if (!strcmp(end, "T")) mul = 1024.0 * 1024 * 1024 * 1024;
    else if (!strcmp(end, "GB")) mul = 1e9;
    else if (!strcmp(end, "TB")) mul = 1e12;
    else if (*end) mul = -1;
    if (end == v || errno || mul < 0 || !(x > 0) || !isfinite(x))
        return cli_usage_error("plan", "--mem", "expected a size such as 80G or 141GB, got '%s'", v);
    *out = x * mul;
    return 0;
}

static oar_plan_model *load_model(const char *arg, int *rc) {
    if (!strncmp(arg, "gpt:", 4)) {
        int v[5];
        char extra;
        if (sscanf(arg + 4, "%d,%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &v[4], &extra) != 5) {
            *rc = cli_usage_error("plan", arg, "expected gpt:LAYERS,D_MODEL,HEADS,SEQ,VOCAB");
            return NULL;
        }
        oar_plan_model *m = oar_plan_model_transformer(
            &(oar_plan_transformer){.layers = v[0], .d_model = v[1], .heads = v[2], .seq = v[3], .vocab = v[4]});
        if (!m) *rc = cli_usage_error("plan", arg, "%s", oar_last_error());
        return m;
    }
    if (cli_file_kind_of(arg) != CLI_FILE_FOLDER) {
        *rc = cli_usage_error("plan", arg, "expected a saved-model folder or gpt:LAYERS,D_MODEL,HEADS,SEQ,VOCAB");
        return NULL;
    }
    oar_graph *g = oar_graph_load(arg);
    oar_plan_model *m = g ? oar_plan_model_from_graph(g, 0) : NULL;
    oar_graph_free(g);
    if (!m) *rc = cli_fail("plan", "%s", oar_last_error());
    return m;
}

static int calibrate(const char *path, int *argc, char ***argv) {
    /* under mpirun: the collectives too (every rank measures; rank 0 writes) */
    bool dist = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
    if (dist && oar_dist_init(argc, argv)) return cli_fail("plan", "%s", oar_last_error());
    oar_plan_calib c;
    int st = oar_plan_calibrate(&c);
    int rank = dist ? oar_dist_rank() : 0;
    if (!st && rank == 0) st = oar_plan_calib_save(&c, path);
    int rc = st ? cli_fail("plan", "%s", oar_last_error()) : CLI_OK;
    if (!st && rank == 0)
        printf("wrote %s: GEMM %.3g FLOP/s (%.3g at smallest dimension %g, %.3g at %g; at a 1024 x 1024 "
               "weight %.3g and %.3g), elementwise %.3g B/s, "
               "%.3g s per op call, Adam %.3g s per parameter, all-reduce alpha %.3g s, beta %.3g s/B, sync wait "
               "%.3g s after %.3g s of compute (%d ranks)\n", path, c.matmul_flops, c.gemm_rate[0],
               oar_plan_gemm_dims[0], c.gemm_rate[OAR_PLAN_GEMM_CLASSES - 1],
               oar_plan_gemm_dims[OAR_PLAN_GEMM_CLASSES - 1], c.gemm_rate_wide[0],
               c.gemm_rate_wide[OAR_PLAN_GEMM_CLASSES - 1], c.ew_bw, c.op_overhead, c.optim_time, c.alpha, c.beta,
               c.sync, c.sync_phase, c.ranks);
    if (dist) oar_dist_finalize();
    return rc;
}

int cli_plan(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(cli_plan_help, stdout), CLI_OK;
    const char *model = NULL, *kind = "h200", *calib = NULL, *calibrate_out = NULL;
    long long devices = 0, batch = 0, per_node = 0, runners = 5;
    double mem = 0;
    bool runnable = false;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        bool takes = !strcmp(a, "--devices") || !strcmp(a, "--mem") || !strcmp(a, "--batch") ||
                     !strcmp(a, "--cluster") || !strcmp(a, "--per-node") || !strcmp(a, "--calib") ||
                     !strcmp(a, "--runners-up") || !strcmp(a, "--calibrate");
        if (takes && i + 1 >= argc) return cli_usage_error("plan", a, "missing its value");
        const char *v = takes ? argv[++i] : NULL;
        if (!strcmp(a, "--devices")) rc = parse_int(a, v, 1, 1 << 20, &devices);
        else if (!strcmp(a, "--mem")) rc = parse_size(v, &mem);
        else if (!strcmp(a, "--batch")) rc = parse_int(a, v, 1, 1LL << 40, &batch);
        else if (!strcmp(a, "--per-node")) rc = parse_int(a, v, 1, 1 << 20, &per_node);
        else if (!strcmp(a, "--runners-up")) rc = parse_int(a, v, 0, 1000, &runners);
        else if (!strcmp(a, "--cluster")) kind = v;
        else if (!strcmp(a, "--calib")) calib = v;
        else if (!strcmp(a, "--calibrate")) calibrate_out = v;
        else if (!strcmp(a, "--runnable-only")) runnable = true;
        else if (a[0] == '-' && a[1]) rc = cli_usage_error("plan", a, "unknown option");
        else if (!model) model = a;
        else rc = cli_usage_error("plan", a, "one MODEL only");
    }
    if (rc) return rc;
    if (calibrate_out) {
        if (model) return cli_usage_error("plan", model, "--calibrate takes no MODEL");
        return calibrate(calibrate_out, &argc, &argv);
    }
    if (!model) return cli_usage_error("plan", "MODEL", "missing (a saved-model folder or gpt:L,D,HEADS,SEQ,VOCAB)");
    if (!devices) return cli_usage_error("plan", "--devices", "missing (how many devices)");
    oar_cluster c;
    if (calib) {
        oar_plan_calib k;
        if (oar_plan_calib_load(&k, calib) || oar_cluster_from_calib(&c, &k, (int)devices, mem > 0 ? mem : 8e9))
            return cli_fail("plan", "%s", oar_last_error());
    } else if (oar_cluster_preset(&c, kind, (int)devices))
        return cli_usage_error("plan", "--cluster", "%s", oar_last_error());
    if (mem > 0) c.mem_bytes = mem;
    if (per_node) c.devices_per_node = (int)per_node;
    if (!batch) batch = 8 * devices;
    oar_plan_model *m = load_model(model, &rc);
    if (!m) return rc;
    oar_plan_options o = {.global_batch = batch, .runners_up = (int)runners, .runnable_only = runnable};
    if (!runners) o.runners_up = 0;
    oar_plan_result *r = oar_plan_parallel(m, &c, &o);
    rc = r && !oar_plan_result_print(r, stdout) ? CLI_OK : cli_fail("plan", "%s", oar_last_error());
    oar_plan_result_free(r);
    oar_plan_model_free(m);
    return rc;
}
