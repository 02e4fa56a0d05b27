/* ONNX in a build without it (OAR_WITH_ONNX=OFF, or libprotobuf-c,
 * protoc-c or onnx.proto not found): CMake compiles this file instead of
 * the rest of src/onnx/. The public functions stay, so programs link the
 * same, and each fails saying why. */
#include "../core/core.h"
#include <oar/onnx.h>

static void *off(const char *fn) {
    oari_error(OAR_ERR_UNSUPPORTED, "%s: this oar was built without ONNX (OAR_WITH_ONNX=OFF; it needs "
               "libprotobuf-c, protoc-c and python3-onnx's onnx.proto)", fn);
    return NULL;
}

oar_graph *oar_onnx_load(const char *path) { return off(__func__); }
oar_graph *oar_onnx_load_buffer(const void *data, size_t n) { return off(__func__); }
oar_graph *oar_onnx_load_with(const char *path, const oar_onnx_options *opt) { return off(__func__); }
oar_graph *oar_onnx_load_buffer_with(const void *data, size_t n, const oar_onnx_options *opt) {
    return off(__func__);
}
oar_tensor *oar_onnx_tensor_load(const char *path) { return off(__func__); }
oar_tensor *oar_onnx_tensor_load_buffer(const void *data, size_t n) { return off(__func__); }

int oar_onnx_export(const oar_graph *g, const char *path, const oar_onnx_export_options *opt) {
    off(__func__);
    return OAR_ERR_UNSUPPORTED;
}
