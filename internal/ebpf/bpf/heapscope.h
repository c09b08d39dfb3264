// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Types and constants shared by heapscope.bpf.c and the Go loader. The Go
// side gets the structs from bpf2go (-type) and mirrors the constants in
// consts.go; a test checks they agree.

#ifndef HEAPSCOPE_H
#define HEAPSCOPE_H

#define MAX_FRAMES 127 // kernel.perf_event_max_stack's default

// event.Kind
#define KIND_ALLOC 1
#define KIND_REALLOC 2
#define KIND_FREE 3
#define KIND_MMAP 4
#define KIND_MUNMAP 5

// event.Func
#define FUNC_MALLOC 1
#define FUNC_CALLOC 2
#define FUNC_REALLOC 3
#define FUNC_REALLOCARRAY 4
#define FUNC_FREE 5
#define FUNC_POSIX_MEMALIGN 6
#define FUNC_ALIGNED_ALLOC 7
#define FUNC_MEMALIGN 8
#define FUNC_VALLOC 9
#define FUNC_PVALLOC 10
#define FUNC_NEW 11
#define FUNC_NEW_ARRAY 12
#define FUNC_DELETE 13
#define FUNC_DELETE_ARRAY 14
#define FUNC_MMAP 15
#define FUNC_MUNMAP 16
#define FUNC_MREMAP 17

// event.Family
#define FAMILY_MALLOC (1 << 0)
#define FAMILY_CALLOC (1 << 1)
#define FAMILY_REALLOC (1 << 2)
#define FAMILY_FREE (1 << 3)
#define FAMILY_ALIGNED (1 << 4)
#define FAMILY_CXX (1 << 5)
#define FAMILY_MMAP (1 << 6)

// event.Heap
#define HEAP_LIBC 0
#define HEAP_EXE 1
#define HEAP_MMAP 2
#define HEAP_JEMALLOC 3
#define HEAP_TCMALLOC 4
#define HEAP_MIMALLOC 5

// Indexes of the per-CPU counters. The first six are event.LostReason.
#define CTR_LOST_RING_FULL 0
#define CTR_LOST_MAP_FULL 1
#define CTR_LOST_OTHER 5
#define CTR_STACKS_LOST 6
#define CTR_DELIVERED 7 // aggregate mode: calls accounted in the maps
#define CTR_UNMATCHED 8 // aggregate mode: frees of blocks never seen
#define CTR_LIBS_LOST 9 // library records the ring had no room for
#define CTR_STACKS_CUT 10 // stacks cut at MAX_FRAMES
#define CTR_UW_FALLBACK 11 // frames unwound by frame pointer where tables were used
#define CTR_STACKS_BROKEN 12 // stacks whose walk lost the chain before the thread's first frame
#define CTR_STACKS_NOTABLE 13 // of those, after a frame in code no unwind table covered
#define CTR_STACKS_STORED 14 // stacks added to the stacks map
#define NUM_COUNTERS 15

// A probe's cookie: the function it is on, the heap, how far the stack
// pointer has moved between the function's entry and the probed
// instruction, and (aggregate mode) the process's index in the tables.
#define COOKIE_FUNC(c) ((__u8)(c))
#define COOKIE_HEAP(c) ((__u8)((c) >> 8))
#define COOKIE_SP(c) ((__u64)(__u16)((c) >> 16))
#define COOKIE_PIDX(c) (((c) >> 32) & MAX_PIDX)
// A free site's window of glibc's internal callers (see internal_frees);
// 0: none.
#define COOKIE_WINDOW(c) ((__u32)((c) >> 48) & (MAX_WINDOWS - 1))
#define MAX_WINDOWS 16
#define WINDOW_RANGES 4

// A stack walk reads the user stack to the end of a page at once (at most
// WINDOW bytes), not frame by frame: a read of user memory costs several
// times more than copying a page (here, in a VM, 100-300 ns a read).
#define WINDOW 4096
#define PAGE_SIZE_ 4096

// Stacks are named by a 64-bit hash of their frames; 0 is no stack.
#define NO_STACK 0
// How far above the stack pointer a frame pointer may point: a walk stops
// at a frame pointer outside [sp, sp+MAX_STACK_SPAN).
#define MAX_STACK_SPAN (64ULL << 20)

struct stack {
	// Return addresses, innermost first; 0 ends them. One slot more than
	// frames, for the end, and so that an index masked with 127 is in
	// bounds, which the verifier can see.
	__u64 ip[MAX_FRAMES + 1];
};

#define MAP_ANONYMOUS_ 0x20

// What a thread is in the middle of.
#define STATE_IDLE 0
#define STATE_ALLOC 1  // between an allocation's entry and its return
#define STATE_NEW 2    // in operator new, before its malloc
#define STATE_DELETE 3 // in operator delete, before its free
#define STATE_FREED 4  // in an operator delete already reported, before its free

struct thread {
	__u64 a0;    // size asked; operator delete: the block
	__u64 a1;    // realloc: the old block; posix_memalign: where to store
	__u64 sp;    // stack pointer at the entry of the outermost call
	__u64 stack; // stack taken at operator new/delete's entry
	__u8 state;
	__u8 func;  // the function to report
	__u8 inner; // the function whose return is probed
	__u8 heap;
	__u8 sys; // syscall in progress (FUNC_MMAP, ...), else 0
	__u8 pad;
	__u16 pidx; // the process's index (aggregate mode)
	__u32 depth; // nested traced allocations inside the outermost
	__u32 pad2;
	__u64 s_addr, s_len, s_old_len;
	struct stack scratch; // where a stack is put together: the last one
	__u64 last_stack;     // scratch's key, or NO_STACK when it holds none
	__u32 last_n;         // scratch's frames
	__u32 pad3;
	__u64 window[WINDOW / 8 + 1]; // user stack read at once, and a slot to spare
	// Unwinding with tables: the rule found for each frame of the last
	// stack (scratch), under the process's ranges of generation rules_gen.
	// A stack whose frames so far are the last one's reuses them.
	__u64 rules[MAX_FRAMES + 1];
	__u32 rules_gen;
	__u32 pad4;
	// Sampling (sample_rate > 0): bytes left until the next sampled
	// allocation; whether smp_left has been drawn; the decision for the
	// allocation in progress (SMP_*), taken at its entry.
	__s64 smp_left;
	__u8 smp_init;
	__u8 smp;
	__u8 pad5[6];
};

// What sampling decided for the allocation in progress.
#define SMP_SKIP 0 // not sampled: its return records nothing
#define SMP_NEW 1  // sampled: record it, as an allocation (a realloc's old block was not)
#define SMP_WAS 2  // a realloc of a sampled block: record it, with the old block
#define SMP_DROP 3 // a realloc of a sampled block, its result not sampled: record the old block's free

// A sampled block, in the sampled map.
struct smp_key {
	__u64 addr;
	__u32 pid;
	__u32 pad;
};

struct event {
	__u64 time;
	__u64 addr;
	__u64 size;
	__u64 old_addr;
	__u64 old_size;
	__u64 stack; // key in the stacks map, or NO_STACK
	__u32 pid;
	__u32 tid;
	__u8 kind;
	__u8 func;
	__u8 heap;
	__u8 spill; // aggregate mode: SPILL_* (stream mode: 0)
	__u32 wobjs; // aggregate mode, SPILL_NEW: the block's weight in objects (wbytes is old_size)
};

// Aggregate mode sends through the ring what its tables cannot hold (see
// record): a block with no room (SPILL_NEW, with its weights), and, once a
// process has spilled, the frees the tables do not find (SPILL_OLD), which
// may be of a spilled block.
#define SPILL_NEW 1
#define SPILL_OLD 2

// A loaded object, from the dynamic loader's list (struct link_map), sent
// through the ring when the loader says its list changed. Told from a struct
// event by its size.
#define MAX_LIBS 64
#define LIB_NAME_MAX 256
struct lib {
	__u64 base; // l_addr: what the object's addresses are relative to
	__u32 pid;
	__u32 index; // position in the loader's list
	char name[LIB_NAME_MAX];
};

// A fork or an exec of a followed process (the follow map), sent through
// the ring; told from struct event and struct lib by its size. The process
// it names is held (stopped) when held is 0, until user space has attached
// its probes and continues it; else held is the error of the signal.
#define NOTE_FORK 1
#define NOTE_EXEC 2
#define NOTE_LIBS 3 // the loader added objects (dl_hold)
struct note {
	__u64 time;
	__u32 kind;
	__u32 pid;  // the new process (fork) or the process that exec'd
	__u32 ppid; // fork: the process that forked
	__s32 held;
};

// Unwinding with tables (Config.UnwindTables): the unwind package's entries
// (unwind/FORMAT.md), {u32 addr, u16 cfa_off, u8 kind, u8 aux} as one u64,
// of every file in chunks shared by all processes, each file's table one or
// more runs of them; and for each process the ranges of its executable
// mappings, sorted by start, each naming a run and the bias that turns a pc
// into an entry's addr (a mapping whose table is in several runs has a
// range for each), or (count 0) saying the file has no table.
#define UW_KIND_FALLBACK 0
#define UW_KIND_RSP 1
#define UW_KIND_RBP 2
#define UW_KIND_PLT 3
#define UW_KIND_END 4
#define UW_KIND_NOTABLE 5 // not the unwind package's: no table covers the address
#define UW_NOTABLE ((__u64)UW_KIND_NOTABLE << 48)
#define UW_MAX_RANGES 256 // a power of two: 8 steps of binary search
#define UW_SEARCH_STEPS 19 // enough for a run of a chunk and its end marker
// The entries live in chunks (arrays of UW_CHUNK_ENTRIES, 2 MiB), at most
// UW_MAX_CHUNKS of them; a file's table may be split into runs in several.
#define UW_CHUNK_ENTRIES (1 << 18)
#define UW_MAX_CHUNKS 512
struct uw_range {
	__u64 start, end; // the part of a mapping one run covers
	__u64 bias;       // addr = pc - bias
	__u32 first;      // the run's first entry in its chunk
	__u32 count;      // its entries, the last one past the range (an end marker, or the next run's first); 0: no table
	__u32 chunk;
	__u32 pad;
};
struct uw_proc {
	__u32 n;
	__u32 gen; // changed by user space with the ranges: cached rules are stale
	struct uw_range r[UW_MAX_RANGES];
};

// Aggregate mode keeps its live blocks and per-stack totals in tables of
// its own, arrays that BPF reaches without a helper call and user space
// reads through mmap: a key's slot is in one of two buckets of BUCKET_SLOTS
// (picked by two halves of its hash), claimed with a compare-and-swap. A
// key of 0 is a free slot; one with KEY_BUSY is being filled in. Keys name
// a process by its index (PIDX, from the probe's cookie), not its pid, so
// that a live block's key fits in 64 bits: PIDX << PIDX_SHIFT | address.
#define BUCKET_SLOTS 8
#define KEY_BUSY (1ULL << 63)
#define PIDX_SHIFT 48
#define MAX_PIDX 0x7fff
#define ADDR_MASK ((1ULL << PIDX_SHIFT) - 1)

struct bucket {
	__u64 key[BUCKET_SLOTS];
};

// A live block; its key is PIDX << PIDX_SHIFT | address.
struct live_val {
	__u64 size;
	__u64 time;
	__u64 stack;
	// What the block added to its stack's totals, subtracted when it is
	// freed: size and 1, or when sampling its weights (smp_weights).
	__u64 wbytes;
	__u64 wobjs;
};

// What a stack allocated (blocks that were then live). What it freed is
// what of that is no longer live. Its key is a hash of pidx and stack.
// When sampling, allocs and alloc_bytes are estimates: the sums of the
// sampled blocks' weights.
struct total_val {
	__u64 allocs;
	__u64 alloc_bytes;
	__u64 stack;
	__u32 pidx;
	__u32 pad;
};

#endif
