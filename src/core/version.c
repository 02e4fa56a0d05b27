/* oar_version: the version of the library (include/oar/tensor.h). */
#include <oar/tensor.h>

const char *oar_version(void) { return OAR_VERSION; }
