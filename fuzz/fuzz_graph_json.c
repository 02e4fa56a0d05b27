/* libFuzzer harness for the graph JSON of saved models (model.json,
 * src/graph/serialize.c through oari_graph_from_json): every input is a
 * model.json text; each constant it declares is given a zero tensor of its
 * dtype and shape (through a safetensors buffer), so that the fuzzer
 * reaches the graph checks and not only the weights lookup. A graph that
 * loads must verify, survive a clone and run through the executor on zero
 * inputs (dynamic dims 1) without a crash: issue 27's forged "kind" and
 * trace sizes of 0 and 1e300 crashed here. One that does not must say why.
 *
 *     ./build-fuzz/fuzz_graph_json -max_total_time=300 build-fuzz/corpus/fuzz_graph_json fuzz/corpus/fuzz_graph_json */
#include "fuzz_util.h"

#include <cjson/cJSON.h>

/* A safetensors buffer with a zero tensor for each constant value of the
 * model.json tree (at most 64 KiB of data; others are left out, and the
 * loader then names them missing). */
static oar_tensor_dict *weights_for(const char *text, size_t size) {
    static const char *const st_names[OAR_DTYPE_COUNT] = {
        [OAR_BOOL] = "BOOL", [OAR_U8] = "U8",     [OAR_I32] = "I32", [OAR_I64] = "I64",
        [OAR_F16] = "F16",   [OAR_BF16] = "BF16", [OAR_F32] = "F32", [OAR_F64] = "F64",
        [OAR_C64] = "C64",   [OAR_C128] = "C128"};
    cJSON *root = cJSON_ParseWithLength(text, size);
    cJSON *head = cJSON_CreateObject();
    uint64_t off = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "values")) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(v, "kind"), *name = cJSON_GetObjectItemCaseSensitive(v, "name");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype"), *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
        if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "const") || !cJSON_IsString(name) || !name->valuestring[0] ||
            !strcmp(name->valuestring, "__metadata__") || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
            cJSON_GetArraySize(shape) > OAR_MAX_DIMS || cJSON_GetObjectItemCaseSensitive(head, name->valuestring))
            continue;
        int d = -1;
        for (int k = 0; k < OAR_DTYPE_COUNT; k++)
            if (!strcmp(oar_dtype_name((oar_dtype)k), dt->valuestring)) d = k;
        if (d < 0) continue;
        uint64_t bytes = oar_dtype_size((oar_dtype)d);
        bool ok = true;
        cJSON *sh = cJSON_CreateArray();
        const cJSON *e;
        cJSON_ArrayForEach(e, shape) { /* whole numbers up to 64 Ki, 64 KiB in all */
            double x = cJSON_IsNumber(e) ? e->valuedouble : -1;
            ok = ok && x >= 0 && x <= 65536 && x == (double)(int64_t)x;
            if (!ok) break;
            bytes *= (uint64_t)x;
            ok = bytes <= 65536;
            cJSON_AddItemToArray(sh, cJSON_CreateNumber(x));
        }
        if (!ok || off + bytes > 65536) {
            cJSON_Delete(sh);
            continue;
        }
        cJSON *ent = cJSON_AddObjectToObject(head, name->valuestring);
        cJSON_AddStringToObject(ent, "dtype", st_names[d]);
        cJSON_AddItemToObject(ent, "shape", sh);
        cJSON *offs = cJSON_AddArrayToObject(ent, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *h = cJSON_PrintUnformatted(head);
    size_t hl = strlen(h), total = 8 + hl + off;
    unsigned char *buf = calloc(total, 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, h, hl);
    oar_tensor_dict *w = oar_safetensors_load_memory(buf, total, "weights.fuzz.safetensors");
    free(buf);
    cJSON_free(h);
    cJSON_Delete(head);
    cJSON_Delete(root);
    return w;
}

static int fuzz_one(const uint8_t *data, size_t size) {
    oar_tensor_dict *w = weights_for((const char *)data, size);
    fuzz_check(w != NULL, "fuzz_graph_json", "the harness's weights do not load");
    oar_clear_error();
    oar_graph *g = oari_graph_from_json((const char *)data, size, w, "model.json", "weights.fuzz.safetensors");
    oar_tensor_dict_free(w);
    fuzz_note("fuzz_graph_json", g != NULL);
    if (!g) {
        fuzz_check(oar_last_error()[0] != 0, "fuzz_graph_json", "a failed load left no message");
        return 0;
    }
    fuzz_check(oar_graph_verify(g) == 0, "fuzz_graph_json", "a loaded graph does not verify");
    oar_graph *c = oar_graph_clone(g);
    fuzz_check(c && oar_graph_verify(c) == 0, "fuzz_graph_json", "a clone does not verify");
    oar_graph_free(c);
    fuzz_run_graph(g, "fuzz_graph_json");
    oar_graph_free(g);
    return 0;
}

FUZZ_TARGET(fuzz_one)
