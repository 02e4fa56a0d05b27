/* Start-up: the library's one constructor. Each layer that a lower one
 * must reach installs its hooks here, in layer order, before any user code
 * runs: the CPU registers itself as the first device (as the plugin loader
 * registers a plugin's), autograd its record hook and the grad_fn slot,
 * dist its dispatch hook, slot class and the dist_reshard op, and the
 * tracer its dispatch hooks. This is the top layer: it may call every
 * other, and none calls it (docs/architecture.md, "Layers").
 *
 * A static link keeps this object only if something names it, so the
 * static library's CMake target and pkg-config file pass
 * -Wl,--undefined=oari_start. */
#include "../autograd/node.h"
#include "../backends/cpu/cpu.h"
#include "../dist/dist.h"
#include "../graph/ir.h"

/* Priority 101: before the constructors of a program linked statically. */
__attribute__((constructor(101))) void oari_start(void) {
    oari_cpu_install(); /* the registry is empty here, so this cannot fail */
    oari_autograd_install();
    oari_dist_install();
    oari_graph_install();
}
