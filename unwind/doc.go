// Package unwind builds compact x86-64 unwind tables from a module's call
// frame information (.eh_frame, and the .debug_frame of the file or of its
// separate debug file), for unwinders that cannot afford to interpret DWARF
// at each frame: the preload interposer's in-process unwinder and the BPF
// unwinder. One format, one builder, two consumers; the format is in
// FORMAT.md.
//
// A table belongs to one file (keyed by its build-id) and is a sorted array
// of 8-byte entries keyed by the file's virtual address: a consumer computes
// vaddr = pc − load bias, finds the last entry whose Addr ≤ vaddr − Base by
// binary search, and applies its rule: CFA from RSP or RBP plus an offset,
// the caller's RBP saved at a CFA-relative slot or unchanged, the return
// address at CFA−8; or the stack's end, the PLT rule, or "no rule here, fall
// back".
package unwind
