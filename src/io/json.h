/* cJSON with oar's allocator: call oari_json_init() before any cJSON call
 * so that its allocations, like every other host allocation, go through
 * the one hook (oar_set_allocator). */
#ifndef OARI_JSON_H
#define OARI_JSON_H

#include "../core/core.h"

#include <cjson/cJSON.h>

OARI_HIDDEN void oari_json_init(void);
/* True (once) if a cJSON allocation failed on this thread since the last
 * call: a failed parse then means out of memory, not bad input. */
OARI_HIDDEN bool oari_json_take_oom(void);

#endif
