/* The memory planner: buffers live at once never overlap; dead buffers
 * are reused, so a chain needs two buffers' worth, not all of them. */
#include "test.h"

#include "graph/ir.h"

static void test_chain(void) {
    /* a chain x0 -> x1 -> ... -> x9, each 1000 bytes, each read by the next */
    oari_membuf b[10];
    for (int i = 0; i < 10; i++) b[i] = (oari_membuf){.size = 1000, .first = i, .last = i + 1};
    int64_t unplanned = 0, peak = oari_memplan(b, 10, &unplanned);
    CHECK(unplanned == 10 * 1024);
    CHECK(peak == 2 * 1024);
}

static void test_random(void) {
    srand(7);
    for (int round = 0; round < 50; round++) {
        oari_membuf b[60];
        int n = 1 + rand() % 60;
        for (int i = 0; i < n; i++) {
            int first = rand() % 40;
            b[i] = (oari_membuf){.size = 1 + rand() % 5000, .first = first, .last = first + rand() % 10};
        }
        int64_t unplanned = 0, peak = oari_memplan(b, n, &unplanned);
        CHECK(peak <= unplanned);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            bad += b[i].offset % 64 != 0 || b[i].offset < 0 || b[i].offset + b[i].size > peak;
            for (int j = 0; j < i; j++) {
                bool live = b[i].first <= b[j].last && b[j].first <= b[i].last;
                bool mem = b[i].offset < b[j].offset + b[j].size && b[j].offset < b[i].offset + b[i].size;
                bad += live && mem;
            }
        }
        CHECK(bad == 0);
    }
}

int main(void) {
    RUN(test_chain);
    RUN(test_random);
    return test_summary();
}
