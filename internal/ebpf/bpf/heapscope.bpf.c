// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// heapscope's BPF side: uprobes on the allocator entry points of traced
// processes, and the syscall tracepoints of mmap, munmap and mremap.
//
// Every probe is attached per process (a PID-filtered uprobe), so untraced
// processes never trap. The only system-wide programs are the syscall
// tracepoints (BPF on a tracepoint cannot be limited to a process); they
// return after one hash lookup for untraced processes.
//
// An allocation is seen twice: at its entry (arguments) and at its return
// (the block, and the stack, which is only complete there). A free is seen
// once, at its entry. State between the two halves of a call lives in task
// local storage, which the kernel frees with the thread.
//
// Stream mode sends every call as a struct event through a ring buffer;
// aggregate mode keeps live blocks and per-stack totals in maps instead.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "heapscope.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// The parts, in the order each needs the ones before it.
#include "maps.inc"
#include "stack.inc"
#include "aggregate.inc"
#include "weights.inc"
#include "sample.inc"
#include "alloc.inc"
#include "free.inc"
#include "cxx.inc"
#include "probe.inc"
#include "loader.inc"
#include "mmap.inc"
#include "children.inc"

// Tracing through otel_memory USDT probes (Config.Source).
#include "usdt.inc"

// Keep the record types in BTF for bpf2go.
const struct event *unused_event __attribute__((unused));
const struct lib *unused_lib __attribute__((unused));
const struct note *unused_note __attribute__((unused));
