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
// executable defines them (a static binary); and the C++ runtime's operator
// new and delete, all variants. Probes are attached per process (a PID
// filter on each uprobe, with uprobe_multi links where the kernel has them),
// so untraced processes never trap.
//
// Each probe sits on the first instruction of its function that the kernel
// emulates, rather than single-steps (tens of microseconds in a VM): glibc's
// free starts with test %rdi,%rdi, and its probe goes past the NULL test.
//
// An allocation is seen at its entry (arguments) and its return (the block,
// and the stack: only complete there). operator new and delete are seen at
// their entry, which leaves a note for the malloc or free they call: one
// event, named after the operator. Calls nested in a traced call
// (realloc(NULL, n) jumping to malloc) are part of the outer event.
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
// buffer; the consumer is woken when a quarter of the ring is queued, and
// at least every FlushInterval. In Aggregate mode the live blocks and
// per-stack totals are kept in BPF tables and sent as event.Snapshot
// records at Flush and Close. The tables are arrays with buckets of slots
// claimed by compare-and-swap, which the programs reach without a helper
// call (a hash map's update costs more than the rest of the program), and
// which this process reads through mmap. Either way, a call is delivered
// or counted lost (ring full, map full): delivered + lost is the number of
// calls made while traced.
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
// precede a process's events. Modules mapped later are learnt from the
// dynamic loader (a probe where it announces changes to its list, which
// also covers a process launched held at its exec, before its libraries are
// mapped), or by reading the maps again when a stack points outside the
// known ones. A Stack record (ids scoped by process) precedes the first
// event that uses it. Each process ends with an Exit record, and Close sends
// a last Stats.
//
// # Limits
//
// Stacks are walked with frame pointers: code built without them gives
// short or wrong stacks. An allocator in a shared library other than the C
// library (an LD_PRELOADed jemalloc) is not probed. The probes are x86-64
// only. Aggregate mode traces at most 32767 processes at once, and counts
// a block above 2^48 (possible only with 5-level page tables, when a
// program asks for such addresses) as lost (event.LostOther).
package ebpf
