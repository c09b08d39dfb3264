// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): the load-time settings, the maps, and the per-thread state every probe uses.

// Set at load time.
volatile const __u8 aggregate;		  // aggregate mode, else stream
volatile const __u32 families;		  // FAMILY_* enabled
volatile const __u64 wakeup_mask = ~0ULL; // stream: ~(W-1), W (a power of two) the bytes queued between wakeups
__u64 wake_block; // the block of W bytes of the ring's producer position the consumer was last woken for

// Sampling: the mean number of bytes allocated between two sampled
// allocations (R); 0 records every call. See smp_draw.
volatile const __u64 sample_rate;

// Changed while tracing (SetStacks).
volatile __u8 stack_kinds; // 1 << KIND_*: kinds that carry a stack

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // resized by the loader
} events SEC(".maps");

// Stacks by the hash of their frames and process. Not a
// BPF_MAP_TYPE_STACK_TRACE: the kernel's walk reads the frame pointer it
// ends at, usually 0, and the fault that costs is the largest single part
// of an allocation's cost in a VM. The walk below stops before it.
//
// stacks holds the frames of the stacks user space has not read yet; once
// it has, it puts the stack's key in known and deletes its frames, so that
// stacks holds only those in flight (a kilobyte each) and known the ones
// already seen (a few bytes each): a program with a million distinct
// stacks needs a million keys, not a gigabyte of frames. A stack in known
// is not compared frame by frame again (its 64-bit hash, seeded with the
// process, stands for it).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct stack);
	__uint(max_entries, 1 << 14); // resized by the loader
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, __u8);
	__uint(max_entries, 1 << 20); // resized by the loader
} known SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, NUM_COUNTERS);
} counters SEC(".maps");

// glibc frees what it holds itself at a thread's exit (the thread's tcache
// and the chunks cached in it, chunks the program freed long before): calls
// into its own allocator that are not the program's. A window is the code of
// the functions that do it, as offsets of their return addresses from the
// free probe's address (the same in every process mapping that libc); the
// free site's cookie says which window applies.
struct window {
	__s64 lo[WINDOW_RANGES], hi[WINDOW_RANGES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct window);
	__uint(max_entries, MAX_WINDOWS);
} internal_frees SEC(".maps");

// Unwinding with tables (see heapscope.h), when uw is set at load time.
volatile const __u8 uw;

// The entries are in chunks of UW_CHUNK_ENTRIES, arrays user space makes
// as tables need room (up to its budget) and frees when they empty. All
// chunks have one size, so that the verifier inlines their lookups as it
// does a plain array's.
struct uw_chunk {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, UW_CHUNK_ENTRIES);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, UW_MAX_CHUNKS);
	__type(key, __u32);
	__array(values, struct uw_chunk);
} uw_chunks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct uw_proc);
	__uint(max_entries, 4096);
} uw_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread);
} threads SEC(".maps");

// Processes traced, for the system-wide syscall tracepoints only.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 4096);
} traced SEC(".maps");

// Aggregate mode's tables (see heapscope.h). The loader sizes them: the
// keys in buckets, the values one per slot.
volatile const __u32 live_mask; // buckets - 1, a power of two less one
volatile const __u32 totals_mask;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct bucket);
	__uint(max_entries, 1);
} live_keys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct live_val);
	__uint(max_entries, BUCKET_SLOTS);
} live_vals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct bucket);
	__uint(max_entries, 1);
} totals_keys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct total_val);
	__uint(max_entries, BUCKET_SLOTS);
} totals_vals SEC(".maps");

// Sampling: the live blocks whose allocation was recorded, so that their
// free and realloc are recorded and those of other blocks are not. Sized
// by the loader (Config.MaxLive) when sampling; a sampled block that finds
// it full is not recorded, and counted lost (CTR_LOST_MAP_FULL).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct smp_key);
	__type(value, __u8);
	__uint(max_entries, 1);
} sampled SEC(".maps");

// Aggregate mode: the processes (by index) that have sent a block through
// the ring for want of room in the tables (set by the BPF side, cleared by
// user space with the process's slots): their frees the tables do not find
// go through the ring too.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, MAX_PIDX + 1);
} spilling SEC(".maps");

struct task_struct;

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &i);
	if (v)
		__sync_fetch_and_add(v, 1); // per CPU, but the program may be preempted
}

static __always_inline __u32 family_of(__u8 func)
{
	switch (func) {
	case FUNC_MALLOC:
		return FAMILY_MALLOC;
	case FUNC_CALLOC:
		return FAMILY_CALLOC;
	case FUNC_REALLOC:
	case FUNC_REALLOCARRAY:
		return FAMILY_REALLOC;
	case FUNC_FREE:
		return FAMILY_FREE;
	case FUNC_NEW:
	case FUNC_NEW_ARRAY:
	case FUNC_DELETE:
	case FUNC_DELETE_ARRAY:
		return FAMILY_CXX;
	case FUNC_MMAP:
	case FUNC_MUNMAP:
	case FUNC_MREMAP:
		return FAMILY_MMAP;
	}
	return FAMILY_ALIGNED;
}

static __always_inline struct thread *thread_state(int create)
{
	return bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

static __always_inline int wants_stack(__u8 kind)
{
	return stack_kinds & (1 << kind);
}
