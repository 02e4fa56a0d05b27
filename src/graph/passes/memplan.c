/* Memory planner: places buffers with known live ranges in one arena so
 * that buffers live at the same time never overlap and dead ones are
 * reused (greedy by size, lowest fitting offset first). */
#include "../ir.h"

#include <stdlib.h>

#define ALIGN 64

static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int by_size_desc(const void *a, const void *b) {
    const oari_membuf *x = *(oari_membuf *const *)a, *y = *(oari_membuf *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->first - y->first;
}

static bool overlap_life(const oari_membuf *a, const oari_membuf *b) {
    return a->first <= b->last && b->first <= a->last;
}

int64_t oari_memplan(oari_membuf *bufs, int n, int64_t *unplanned) {
    int64_t total = 0, peak = 0;
    oari_membuf **order = oari_malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return -1;
    for (int i = 0; i < n; i++) {
        order[i] = &bufs[i];
        total += align_up(bufs[i].size);
    }
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    for (int i = 0; i < n; i++) {
        oari_membuf *b = order[i];
        int64_t size = align_up(b->size);
        /* candidate offsets: 0 and the end of every placed buffer live with b;
         * take the lowest one that collides with none of them */
        int64_t best = -1;
        for (int c = -1; c < i; c++) {
            int64_t off = c < 0 ? 0 : order[c]->offset + align_up(order[c]->size);
            if (c >= 0 && !overlap_life(order[c], b)) continue;
            if (best >= 0 && off >= best) continue;
            bool ok = true;
            for (int k = 0; k < i && ok; k++) {
                const oari_membuf *p = order[k];
                if (!overlap_life(p, b)) continue;
                int64_t pe = p->offset + align_up(p->size);
                if (off < pe && p->offset < off + size) ok = false;
            }
            if (ok) best = off;
        }
        b->offset = best;
        if (best + size > peak) peak = best + size;
    }
    oari_free(order, (size_t)(n ? n : 1) * sizeof *order);
    if (unplanned) *unplanned = total;
    return peak;
}
