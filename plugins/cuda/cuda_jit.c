/* Generated kernels on CUDA devices (device ABI 1.3): the CUDA C that oar's
 * compiler renders (src/compiler/codegen_cu.c) is compiled by NVRTC to a
 * cubin for the device's compute capability and loaded with the driver's
 * cuModuleLoadData; programs are kept per device and source until
 * shutdown (an executor's plans ask again for the same source). The driver
 * entry points come through the runtime (cudaGetDriverEntryPointByVersion),
 * so the plugin links no libcuda of its own. Compiled here; it runs only on
 * a GPU (scripts/gpu-check.sh), while tests/compiler/test_cuda_codegen.c
 * compiles the renderer's output with NVRTC on any machine. */
#include "cuda_jit.h"

#include "cuda_device.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define BLOCK 256 /* threads per block of a launch */

static const oar_host_api *host;

typedef CUresult (*module_load_fn)(CUmodule *, const void *);
typedef CUresult (*get_function_fn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
static module_load_fn module_load;
static get_function_fn get_func;
static launch_fn launch_kernel;

typedef struct program {
    struct program *next;
    int dev;
    uint64_t hash;
    size_t len;
    char *source; /* compared on a hash match: a collision must not run the wrong code */
    CUmodule module;
} program;

static program *programs;
static pthread_mutex_t programs_lock = PTHREAD_MUTEX_INITIALIZER;

void oar_cuda_jit_init(const oar_host_api *h) { host = h; }

static int report(int status, const char *what, const char *detail) {
    char msg[512];
    snprintf(msg, sizeof msg, "cuda: %s: %s", what, detail);
    return host->error(status, msg);
}

/* The three driver functions, once; false after reporting. */
static bool driver_entry_points(void) {
    if (module_load && get_func && launch_kernel) return true;
    void *a = NULL, *b = NULL, *c = NULL;
    enum cudaDriverEntryPointQueryResult q1, q2, q3;
    if (cudaGetDriverEntryPointByVersion("cuModuleLoadData", &a, 12000, cudaEnableDefault, &q1) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuModuleGetFunction", &b, 12000, cudaEnableDefault, &q2) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuLaunchKernel", &c, 12000, cudaEnableDefault, &q3) != cudaSuccess ||
        !a || !b || !c) {
        report(-4, "generated kernels", "the driver's module and launch entry points are missing");
        return false;
    }
    module_load = (module_load_fn)a;
    get_func = (get_function_fn)b;
    launch_kernel = (launch_fn)c;
    return true;
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* source compiled by NVRTC for device index into a new cubin (host memory,
 * *n bytes), or NULL after reporting (a compile error with NVRTC's log). */
static char *compile(int index, const char *source, size_t *n) {
    struct cudaDeviceProp pr;
    if (cudaGetDeviceProperties(&pr, index) != cudaSuccess) {
        report(-4, "generated kernels", "cannot read the device's compute capability");
        return NULL;
    }
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", pr.major, pr.minor);
    const char *opts[] = {arch, "--std=c++17"};
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, source, "oar_fused.cu", 0, NULL, NULL) != NVRTC_SUCCESS) {
        report(-4, "generated kernels", "nvrtcCreateProgram failed");
        return NULL;
    }
    char *bin = NULL;
    nvrtcResult r = nvrtcCompileProgram(prog, 2, opts);
    if (r != NVRTC_SUCCESS) {
        size_t ln = 0;
        nvrtcGetProgramLogSize(prog, &ln);
        char *log = host->alloc(ln + 1), *msg = host->alloc(ln + 200);
        if (log && msg && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
            log[ln] = 0;
            snprintf(msg, ln + 200, "cuda: generated kernels failed to compile (NVRTC: %s); log:\n%s",
                     nvrtcGetErrorString(r), log);
            host->error(-1, msg);
        } else {
            report(-1, "generated kernels failed to compile", nvrtcGetErrorString(r));
        }
        if (log) host->free(log, ln + 1);
        if (msg) host->free(msg, ln + 200);
    } else if (nvrtcGetCUBINSize(prog, n) == NVRTC_SUCCESS && (bin = host->alloc(*n ? *n : 1)) &&
               nvrtcGetCUBIN(prog, bin) != NVRTC_SUCCESS) {
        host->free(bin, *n ? *n : 1);
        bin = NULL;
        report(-4, "generated kernels", "nvrtcGetCUBIN failed");
    }
    nvrtcDestroyProgram(&prog);
    return bin;
}

void *oar_cuda_build_program(void *ctx, int index, const char *language, const char *source) {
    (void)ctx;
    if (strcmp(language, "cuda")) {
        report(-3, "build_program", "takes CUDA C source only");
        return NULL;
    }
    if (!driver_entry_points()) return NULL;
    size_t len = strlen(source);
    uint64_t h = fnv1a(source, len);
    pthread_mutex_lock(&programs_lock);
    program *p = programs;
    while (p && !(p->dev == index && p->hash == h && p->len == len && !memcmp(p->source, source, len)))
        p = p->next;
    if (p) {
        pthread_mutex_unlock(&programs_lock);
        return p;
    }
    size_t nbin = 0;
    char *bin = NULL;
    if (oar_cuda_use_device(index) == 0) bin = compile(index, source, &nbin); /* else its error is set */
    CUmodule mod = NULL;
    CUresult e = bin ? module_load(&mod, bin) : CUDA_ERROR_INVALID_VALUE;
    if (bin) host->free(bin, nbin ? nbin : 1);
    if (bin && e != CUDA_SUCCESS) report(-4, "generated kernels", "cuModuleLoadData failed");
    char *copy = e == CUDA_SUCCESS ? host->alloc(len + 1) : NULL;
    if (copy && (p = host->alloc(sizeof *p))) {
        memcpy(copy, source, len + 1);
        *p = (program){.next = programs, .dev = index, .hash = h, .len = len, .source = copy, .module = mod};
        programs = p;
    } else if (e == CUDA_SUCCESS) {
        if (copy) host->free(copy, len + 1);
        report(-2, "generated kernels", "out of host memory");
    }
    pthread_mutex_unlock(&programs_lock);
    return p;
}

void *oar_cuda_get_function(void *ctx, int index, void *prog, const char *name) {
    (void)ctx, (void)index;
    CUfunction f = NULL;
    if (!prog || get_func(&f, ((program *)prog)->module, name) != CUDA_SUCCESS) {
        report(-4, "get_function", name);
        return NULL;
    }
    return f;
}

int oar_cuda_launch(void *ctx, int index, void *fn, int n_buffers, void *const *buffers, int n_scalars,
                    const int64_t *scalars, size_t global_size) {
    (void)ctx;
    enum { MAX_PARAMS = 256 };
    if (n_buffers < 0 || n_scalars < 0 || n_buffers + n_scalars > MAX_PARAMS)
        return report(-3, "launch", "too many kernel parameters");
    if (!global_size) return 0;
    if (oar_cuda_use_device(index)) return -4; /* (no cudaSetDevice when index is already current) */
    cudaStream_t stream = oar_cuda_stream(index); /* the device's stream, as every kernel of the plugin */
    if (!stream) return -4;
    void *params[MAX_PARAMS];
    for (int i = 0; i < n_buffers; i++) params[i] = (void *)&buffers[i]; /* each a device pointer's value */
    for (int j = 0; j < n_scalars; j++) params[n_buffers + j] = (void *)&scalars[j];
    size_t blocks = (global_size + BLOCK - 1) / BLOCK;
    if (blocks > 0x7fffffffu) return report(-3, "launch", "too many work-items");
    if (launch_kernel((CUfunction)fn, (unsigned)blocks, 1, 1, BLOCK, 1, 1, 0, (CUstream)stream, params, NULL) != CUDA_SUCCESS)
        return report(-4, "launch", "cuLaunchKernel failed");
    return 0;
}

void oar_cuda_jit_shutdown(void) {
    pthread_mutex_lock(&programs_lock);
    while (programs) { /* modules go with the context at process exit */
        program *p = programs;
        programs = p->next;
        host->free(p->source, p->len + 1);
        host->free(p, sizeof *p);
    }
    pthread_mutex_unlock(&programs_lock);
}
