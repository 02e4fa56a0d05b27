/* Parsing and importing the ONNX backend node models (Debian's
 * libonnx-testdata, 932 model.onnx files), read into memory first:
 * "oar onnx_parse_ms": protobuf-c unpacking of every ModelProto (and
 * freeing it); "oar onnx_import_ms": oar_onnx_load_buffer of every model
 * (parse, trace, graph verify; failures included). Best of 5 rounds.
 * Peer: bench/peer/onnx_parse.py (onnx.load_model_from_string). */
#include "onnx/onnx_internal.h"
#include <dirent.h>
#include <oar/oar.h>
#include <oar/onnx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/libonnx-testdata/data/node";
    DIR *d = opendir(dir);
    if (!d) {
        printf("skipped: no %s (libonnx-testdata)\n", dir);
        return 0;
    }
    unsigned char **bufs = NULL;
    size_t *lens = NULL, n = 0, cap = 0, total = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "test_", 5)) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/model.onnx", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            bufs = realloc(bufs, cap * sizeof *bufs);
            lens = realloc(lens, cap * sizeof *lens);
        }
        bufs[n] = malloc((size_t)len + 1);
        lens[n] = fread(bufs[n], 1, (size_t)len, f);
        total += lens[n++];
        fclose(f);
    }
    closedir(d);
    double best_parse = 1e30, best_import = 1e30;
    int imported = 0;
    for (int round = 0; round < 5; round++) {
        double t0 = now_ms();
        for (size_t i = 0; i < n; i++) {
            int64_t opset;
            char ops[64];
            oari_onnx_model_ops(bufs[i], lens[i], &opset, ops, sizeof ops);
        }
        double t1 = now_ms();
        imported = 0;
        for (size_t i = 0; i < n; i++) {
            oar_graph *g = oar_onnx_load_buffer(bufs[i], lens[i]);
            imported += g != NULL;
            oar_graph_free(g);
        }
        double t2 = now_ms();
        if (t1 - t0 < best_parse) best_parse = t1 - t0;
        if (t2 - t1 < best_import) best_import = t2 - t1;
    }
    fprintf(stderr, "%zu models, %zu bytes; %d import with every input symbolic\n", n, total, imported);
    printf("oar onnx_parse_ms %.3f ms\n", best_parse);
    printf("oar onnx_import_ms %.3f ms\n", best_import);
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(lens);
    return 0;
}
