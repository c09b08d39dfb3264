// Package ebpf is heapscope's out-of-process provider: it traces the heap of
// running processes with uprobes on their allocator, loaded with
// github.com/cilium/ebpf, and writes what it sees into an event.Sink.
package ebpf
