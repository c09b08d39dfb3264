// preload_tlsonly: a library with nothing but a thread-local variable, for
// TestProgramHeapUntouched's untraced runs. The dynamic loader sizes each
// thread's TLS vector (calloc'd from the program's heap) by the number of
// loaded modules with TLS, so a preloaded library with TLS of its own (the
// interposer's thread state; libunwind's, once the interposer loads it)
// adds 16 bytes to a thread's vector whatever it allocates itself:
// preloading this library (once, or two builds of it) in the untraced run
// makes that the same. Built with -shared -fPIC.
__thread int preload_tlsonly_x __attribute__((tls_model("initial-exec")));

int preload_tlsonly(void) { return preload_tlsonly_x; }
