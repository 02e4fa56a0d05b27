/* libFuzzer harness for saved model folders (oar_graph_load,
 * src/graph/serialize.c): an input is [4-byte little-endian length n][n
 * bytes of model.json][the weights file]. The harness writes both into a
 * folder, the weights under the name model.json's "weights" record gives
 * (or a fixed one); when the length's top bit is set it first makes the
 * record's size and crc32 match the weights, so that the fuzzer reaches
 * past the manifest check. A folder that loads must verify and run through
 * the executor on zero inputs; one that does not must say why.
 *
 *     ./build-fuzz/fuzz_saved_model -max_total_time=300 build-fuzz/corpus/fuzz_saved_model fuzz/corpus/fuzz_saved_model */
#include "fuzz_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <zlib.h>

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

static int fuzz_one(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    bool fix = n >> 31;
    n &= 0x7fffffff;
    if (n > size - 4) n = (uint32_t)(size - 4);
    const char *json = (const char *)data + 4;
    const uint8_t *wts = data + 4 + n;
    size_t wn = size - 4 - n;
    const char *dir = fuzz_dir();
    char path[400];
    DIR *d = opendir(dir); /* the last input's files go */
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
    /* the weights file's name from the record, when it is a plain name */
    char wname[256] = "weights.1.1.safetensors";
    char *text = NULL;
    size_t tn = n;
    cJSON *root = cJSON_ParseWithLength(json, n);
    cJSON *rec = cJSON_GetObjectItemCaseSensitive(root, "weights");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(rec, "file");
    if (cJSON_IsString(file) && strlen(file->valuestring) < 200 && !strchr(file->valuestring, '/') &&
        strcmp(file->valuestring, ".") && strcmp(file->valuestring, "..") && file->valuestring[0])
        snprintf(wname, sizeof wname, "%s", file->valuestring);
    if (fix && cJSON_IsObject(rec)) {
        cJSON_DeleteItemFromObjectCaseSensitive(rec, "bytes");
        cJSON_DeleteItemFromObjectCaseSensitive(rec, "crc32");
        cJSON_AddNumberToObject(rec, "bytes", (double)wn);
        cJSON_AddNumberToObject(rec, "crc32", (double)crc32(0L, wts, (uInt)wn));
        text = cJSON_PrintUnformatted(root);
        tn = text ? strlen(text) : 0;
    }
    snprintf(path, sizeof path, "%s/model.json", dir);
    put(path, text ? text : json, tn);
    snprintf(path, sizeof path, "%s/%s", dir, wname);
    put(path, wts, wn);
    cJSON_free(text);
    cJSON_Delete(root);
    oar_clear_error();
    oar_graph *g = oar_graph_load(dir);
    fuzz_note("fuzz_saved_model", g != NULL);
    if (!g) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_saved_model", "a failed load left no message");
        return 0;
    }
    fuzz_check(oar_graph_verify(g) == 0, "fuzz_saved_model", "a loaded graph does not verify");
    fuzz_run_graph(g, "fuzz_saved_model");
    oar_graph_free(g);
    return 0;
}

FUZZ_TARGET(fuzz_one)
