// Package ebpf is heapscope's out-of-process provider: it traces the heap of
// running processes with uprobes on their allocator, loaded with
// github.com/cilium/ebpf, and writes what it sees into an event.Sink.
//
// # Probes
//
// For each traced process the tracer reads /proc/PID/maps and probes the
// allocator functions of the files it maps (package sites finds them): the
// C library's malloc, calloc, realloc, reallocarray, free, posix_memalign,
// aligned_alloc, memalign, valloc and pvalloc; the same functions when the
// executable defines them (a static binary); the C++ runtime's operator
// new and delete, all variants; and jemalloc, tcmalloc and mimalloc
// wherever they are mapped (a shared library, linked or LD_PRELOADed, or
// linked into the executable, told by a symbol only each defines), with
// their own names for the same functions (je_malloc, tc_malloc, mi_malloc,
// jemalloc's mallocx, rallocx, dallocx and sdallocx). Each event says in
// event.Heap which allocator the block came from. Probes are attached per process (a PID
// filter on each uprobe, with uprobe_multi links where the kernel has them),
// so untraced processes never trap.
//
// Each probe sits on the first instruction of its function that the kernel
// emulates, rather than single-steps (tens of microseconds in a VM): glibc's
// free starts with test %rdi,%rdi, and its probe goes past the NULL test.
//
// An allocation is seen at its entry (arguments) and its return (the block,
// and the stack: only complete there). One BPF program is every allocator
// probe, told by its cookie which part it is: the verifier checks the stack
// walk once (see Tracer.Phases for where starting to trace goes). operator new and delete are seen at
// their entry, which leaves a note for the malloc or free they call: one
// event, named after the operator. An allocator's own operator new or
// delete that calls no PLT entry (jemalloc's sized delete, tcmalloc's new)
// is probed as an allocation or free function itself. Calls nested in a
// traced call (realloc(NULL, n) jumping to malloc) are part of the outer
// event, with the inner call's heap (glibc's reallocarray calling jemalloc's
// realloc is jemalloc's).
//
// # Children
//
// Unless Config.NoFollowFork is set, a process a traced process forks is
// traced from its first instruction: the sched_process_fork tracepoint
// adds it to the followed processes and stops it (bpf_send_signal_task,
// SIGSTOP, Linux 6.13) before it runs; the tracer attaches its probes and
// continues it (SIGCONT). An exec of a followed process is held the same
// way: the old image ends (its Exit, status -1) and the new one is
// attached from scratch, with a Process record of its own under the same
// pid. A parent that waits with WUNTRACED sees the stop and the continue,
// unless the process is traced by a watch of package stopped that follows
// children (WatchOptions.Follow, with Tracer.Holding as its Held), as the
// heapscope session's are: then the stop is a ptrace stop only heapscope
// sees, and stopped.Release ends it.
// Every stop is recorded in a BPF map before it is made, and a watchdog
// process the tracer starts (this program again, see watchdog.go) holds the
// map: when the tracer dies without continuing a process, even by SIGKILL,
// the watchdog continues it.
// On a kernel without bpf_send_signal_task children are not followed
// (FollowsChildren says why).
//
// mmap, munmap and mremap come from the syscall tracepoints, which BPF
// cannot limit to one process: their programs run for every process and
// return after a hash lookup for those not traced. Only anonymous mmaps are
// events; every munmap and mremap of a traced process is (the kernel does
// not say what was mapped there), with event.HeapMmap. An mremap is one
// event of kind event.KindRealloc.
//
// # Modes
//
// In Stream mode every call is an event.Event sent through a BPF ring
// buffer; the consumer is woken once each time the ring's producer
// position enters a new quarter of it, and at least every FlushInterval.
// The consumer is two goroutines, on threads of their own at a raised
// priority: one takes records out of the ring into a queue in this
// process (up to a million events), the other hands them to the sink, so
// that the sink's pauses (a chunk of the trace compressed and written) do
// not fill the ring.
//
// In Aggregate mode the live blocks and per-stack totals are kept in BPF
// tables and sent as event.Snapshot records at Flush and Close, and by
// FlushPeriodic when a snapshot costs less than the calls it stands for.
// The tables are arrays with buckets of slots claimed by compare-and-swap,
// which the programs reach without a helper call (a hash map's update
// costs more than the rest of the program), and which this process reads
// through mmap. A block the tables have no room for goes through the ring
// to this process, which keeps it, and so, from then on, do its process's
// frees the tables do not find: the tables bound the kernel's share of the
// live set, not the live set (when sampling, such a block is lost). Either
// way, a call is delivered or counted lost (ring full, map full):
// delivered + lost is the number of calls made while traced.
//
// # Sampling
//
// With Config.Sample = R > 0 (stream mode), the programs record one
// allocation per R bytes allocated on average, as the interposer does: each
// thread counts down the bytes it allocates from a distance drawn from an
// exponential distribution of mean R (bpf_get_prandom_u32, and -ln u in
// 16.16 fixed point: a log2 by repeated squaring, within 1.6e-5 of exact),
// so an allocation of S bytes is recorded with probability 1 - exp(-S/R),
// which the analysis side unbiases. The draw is at the allocation's entry
// (operator new's, for new): an allocation not sampled takes no stack and
// puts nothing in the ring. The addresses of live sampled blocks are in a
// BPF hash map (MaxLive entries; a sampled block that finds it full is not
// recorded, and counted as event.LostMapFull): their free and realloc are
// recorded, and the free of any other block is dropped after one lookup.
// The realloc of a block not sampled is a new draw, recorded, when it is
// sampled, as a realloc with no old block. The traps remain: every call
// still costs its uprobe traps, which in a VM are most of a traced call's
// cost; sampling removes the stack walk, the ring and the consumer's work.
// In aggregate mode the live table is the set of sampled blocks (no hash
// map), and each sampled block adds to its stack's totals what it stands
// for, S/p bytes and 1/p objects with p = 1 - exp(-S/R), computed in BPF
// in fixed point (within 2e-5) and rounded at random to whole numbers; the
// block keeps them, and its free takes them away. Per-stack sums of sizes
// could not be unbiased afterwards: the weight is not linear in S.
//
// # otel_memory probes
//
// With Config.Source SourceUSDT (or SourceAuto, for the processes that have
// them), a process is traced through OpenTelemetry's otel_memory USDT
// probes instead of its allocator's functions: alloc(ptr, size, weight)
// and free(ptr), which a target that samples its own allocations fires
// (OpenTelemetry eBPF profiler design document 00003). The probes are
// found in the .note.stapsdt notes (package usdt) of the files the
// process maps executable, each file read once; one uprobe per probe
// site, at its file offset, with its semaphore as the reference counter,
// which the kernel raises while attached: that turns the target's sampler
// on. The arguments are read where each site's note says (registers,
// memory, constants: usdt_sites, by cookie; bpf/usdt.inc), by two
// programs of their own (usdt_alloc, usdt_free: classic uprobes, a few
// sites each), not the allocator probes' one program, whose cookie holds a
// role; they are loaded only when Config.Source may use them. An
// allocation's event carries the probe's weight in OldSize, which an
// allocation has no other use for (analyze.EventWeights). A library the
// process loads after the attach is looked at when the loader lists it
// (the dl_state probe), and its probes attached then, which raises its
// semaphores: until then its sampler samples nothing. A process SourceAuto
// traces through its allocator's functions is not probed through a
// library's probes later (its allocations would be counted twice). Stream
// mode only.
//
// # Cost
//
// A traced malloc and free cost three traps (malloc's entry and return,
// free's entry), which in a VM are most of it, and what the programs do,
// where a helper call, and above all a read of user memory, costs far more
// than the instructions around it. So a stack walk reads the user stack a
// page at a time rather than a frame at a time, and takes the thread's
// last stack again when the frames are the same, without looking it up;
// aggregate mode's tables are arrays that need no helper call. A uprobe
// session (one program at the entry and return, Linux 6.13) costs what an
// entry and a return probe cost: it is not used. BenchmarkTrap and
// BenchmarkTracer (with -bpfstats, each program's own time) measure them.
//
// # Records
//
// A Process record and the Module records of its executable mappings
// precede a process's events. Its command line is read again 0.1 s, 1 s and
// 10 s after attach and at detach, and a new one sent as a Process record
// of the same pid and time (a program that writes its title over its argv;
// a forked child, followed with its parent's title). Modules mapped later
// are learnt from the dynamic loader (a probe where it announces changes to
// its list, which also covers a process launched held at its exec, before
// its libraries are mapped), or by reading the maps again when a stack
// points outside the known ones. The names the loader gives are the
// process's: they are opened only as regular files it maps, or resolved in
// its root (package proc's OpenInRoot and OpenIn), and away from the
// delivery goroutine, which waits for them at most a quarter of a second.
// A Stack record (ids scoped by process) precedes the first event that uses
// it. Each process ends with an Exit record, and Close sends a last Stats.
//
// # Stacks
//
// A stack's key is a hash of its frames seeded with the process. The BPF
// side keeps a stack's frames (a kilobyte) only until this process has
// read them (StackMapSize in flight), then only its key (MaxStacks of
// them): stream mode reads them as events come, aggregate mode every
// quarter of a second from its totals. A stack the walk did not take to
// its thread's first frame is counted (event.Stats.StacksCut): at the
// depth limit, or, with unwind tables, where the chain was lost, and of
// those after a frame no table covered (StacksCutNoTable).
//
// # Limits
//
// Stacks are walked with frame pointers unless Config.UnwindTables is set:
// then with unwind tables built from each file's call frame information
// (package unwind; see unwind.go: chunks of kernel memory made as tables
// need them, up to Config.UnwindEntries, freed when no traced process maps
// a file, one user's processes holding at most half), by frame pointer
// only where a file has no table or a table no rule (a process whose
// tables could not be loaded at all is walked by frame pointer, its stacks
// counted as cut for want of a table, event.Stats.StacksCutNoTable). A file
// the dynamic loader maps after attach
// (libc at a launch, a dlopen'ed library) has its table before its code
// runs: the probe on _dl_debug_state stops the process (SIGSTOP) when the
// loader's list has become consistent with more objects than before, and
// the tracer loads the new files' tables and continues it (SIGCONT), also
// when building fails, and at Close. A parent that waits with WUNTRACED
// sees that stop too, unless a watch traces the process (as above); it
// costs nothing per allocation. Stacks stop at 127
// frames; a stack cut there is counted (event.Stats.StacksCutDepth), but
// the event model has no mark on the stack itself. An allocator other than glibc, jemalloc, tcmalloc
// and mimalloc is probed only when the executable defines the standard
// names (malloc, free, ...). The probes are x86-64
// only. Aggregate mode traces at most 32767 processes at once, and counts
// a block above 2^48 (possible only with 5-level page tables, when a
// program asks for such addresses) as lost (event.LostOther).
package ebpf
