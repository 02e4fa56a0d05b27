/* cJSON's memory through oar's allocator hook. cJSON frees without a
 * size, and oari_free needs one, so each block carries its size in a
 * 16-byte header (keeping cJSON's alignment). The hooks are process-wide:
 * a program using cJSON itself allocates through oar's hook as well. */
#include "json.h"

#include <pthread.h>

#define HEADER 16

static _Thread_local bool out_of_memory;

bool oari_json_take_oom(void) {
    bool was = out_of_memory;
    out_of_memory = false;
    return was;
}

static void *json_malloc(size_t n) {
    char *p = n <= SIZE_MAX - HEADER ? oari_malloc(n + HEADER) : NULL;
    if (!p) {
        out_of_memory = true; /* a parse that fails here is not a corrupt file */
        return NULL;
    }
    *(size_t *)p = n + HEADER;
    return p + HEADER;
}

static void json_free(void *q) {
    if (!q) return;
    char *p = (char *)q - HEADER;
    oari_free(p, *(size_t *)p);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void install(void) {
    cJSON_Hooks h = {.malloc_fn = json_malloc, .free_fn = json_free};
    cJSON_InitHooks(&h);
}

void oari_json_init(void) { pthread_once(&once, install); }

/* At load time too: a block must be freed with the hooks that allocated
 * it, so the hooks are in place before a program makes its first cJSON
 * object (this file is linked whenever oar reads or writes JSON). */
__attribute__((constructor)) static void json_init_at_load(void) { oari_json_init(); }
