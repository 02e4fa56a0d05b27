/* Helpers for the saved-model tests: whole files in and out, the weights
 * file a folder's model.json names, and re-committing a hand-edited
 * folder (the manifest's size and crc32 made to match its weights again),
 * so that a test reaches the check it means to. */
#ifndef SAVED_MODEL_UTIL_H
#define SAVED_MODEL_UTIL_H

#include "test.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <zlib.h>

/* The whole file (NUL-ended, malloc'd) and its size, or NULL. */
static inline char *sm_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(*n + 1, 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static inline void sm_spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

/* The weights file dir/model.json names, into path (size bytes); 0 or -1. */
static inline int sm_weights_path(const char *dir, char *path, size_t size) {
    char jp[4200];
    snprintf(jp, sizeof jp, "%s/model.json", dir);
    size_t n;
    char *text = sm_slurp(jp, &n);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "weights"), "file");
    int st = cJSON_IsString(f) ? 0 : -1;
    if (!st) snprintf(path, size, "%s/%s", dir, f->valuestring);
    cJSON_Delete(root);
    free(text);
    return st;
}

/* The JSON text `"weights": {...}` of dir/model.json, for hand-written
 * model.json files in that folder; into buf. */
static inline void sm_weights_record(const char *dir, char *buf, size_t size) {
    char jp[4200];
    snprintf(jp, sizeof jp, "%s/model.json", dir);
    size_t n;
    char *text = sm_slurp(jp, &n);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    char *w = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "weights"));
    snprintf(buf, size, "\"weights\":%s", w ? w : "null");
    cJSON_free(w);
    cJSON_Delete(root);
    free(text);
}

/* Rewrites dir/model.json's weights record to the size and crc32 its
 * weights file has now (a consistent folder with whatever was put in it). */
static inline void sm_recommit(const char *dir) {
    char jp[4200], wp[4400];
    snprintf(jp, sizeof jp, "%s/model.json", dir);
    if (sm_weights_path(dir, wp, sizeof wp)) return;
    size_t n, wn;
    char *text = sm_slurp(jp, &n), *w = sm_slurp(wp, &wn);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    cJSON *rec = cJSON_GetObjectItemCaseSensitive(root, "weights");
    if (rec && w) {
        cJSON_ReplaceItemInObject(rec, "bytes", cJSON_CreateNumber((double)wn));
        cJSON_ReplaceItemInObject(rec, "crc32", cJSON_CreateNumber((double)crc32(0L, (const Bytef *)w, (uInt)wn)));
        char *out = cJSON_Print(root);
        sm_spit(jp, out, strlen(out));
        cJSON_free(out);
    }
    cJSON_Delete(root);
    free(text);
    free(w);
}

/* Number of entries of dir (besides . and ..) whose name contains `part`. */
static inline int sm_count(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

#endif
