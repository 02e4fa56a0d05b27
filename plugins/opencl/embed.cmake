# Writes the OpenCL C source IN as a C string constant into OUT.
file(READ ${IN} src)
string(REPLACE "\\" "\\\\" src "${src}")
string(REPLACE "\"" "\\\"" src "${src}")
string(REPLACE "\n" "\\n\"\n\"" src "${src}")
file(WRITE ${OUT} "/* generated from opencl_kernels.cl by embed.cmake */\nstatic const char oar_opencl_source[] =\n\"${src}\";\n")
