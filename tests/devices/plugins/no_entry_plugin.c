/* Refused: a shared library without oar_plugin_init. */
__attribute__((visibility("default"))) int some_other_function(void) { return 42; }
