// scan_interposer: a stand-in for heapscope's interposer in scan/roots'
// tests, built as a shared library and preloaded under the interposer's
// name (libheapscope_preload-*.so): scan_planted stores a block in its slot,
// a pointer that the roots must not count, since the interposer's tables
// are not the program's.
void *heapscope_fake_slot;
