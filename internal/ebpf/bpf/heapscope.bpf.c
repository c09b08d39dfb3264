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

// Set at load time.
volatile const __u8 aggregate;         // aggregate mode, else stream
volatile const __u32 families;         // FAMILY_* enabled
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
volatile const __u32 live_mask;   // buckets - 1, a power of two less one
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

static __always_inline int wants_stack(__u8 kind) { return stack_kinds & (1 << kind); }

static __always_inline __u64 read_user_u64(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

struct walk {
	struct stack *s;
	struct stack *old; // compare: the stored stack
	__u64 *win;        // the thread's window
	__u64 wbase, wlen; // where the window was read, and how much
	__u64 fp, lo, hash;
	__u32 n;
	__u32 same; // the frames so far are those of the thread's last stack
	// Unwinding with tables: the process's ranges, and the registers of
	// the frame being unwound (lo is its stack pointer, fp its rbp).
	struct uw_proc *uw;
	__u64 pc;
	__u64 *rules; // the thread's rules of the last stack's frames
	__u32 reuse;  // they are valid (same generation of ranges)
	// How the walk ended: at the thread's first frame (whole), at the
	// depth limit (deep), or neither (cut: the chain was lost), after a
	// frame in code no table covered (notable).
	__u8 whole, deep, notable, pad;
};

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0xff51afd7ed558ccdULL;
	return h ^ (h >> 32);
}

// load_window reads the user stack from at to the end of its page, at most
// WINDOW bytes and at least need: a read past the page could fault (at the
// top of a stack), and a read that faults costs several reads that do not.
static __always_inline void load_window(struct walk *w, __u64 at, __u64 need)
{
	__u64 len = PAGE_SIZE_ - (at & (PAGE_SIZE_ - 1));
	if (len > WINDOW)
		len = WINDOW;
	if (len < need)
		len = need;
	w->wbase = at;
	w->wlen = 0;
	if (len <= WINDOW && !bpf_probe_read_user(w->win, len, (void *)at))
		w->wlen = len;
}

// walk_step reads one frame: the return address above frame pointer fp,
// and the caller's frame pointer. A frame pointer lies above the last one,
// within the stack; anything else ends the chain (0 in the outermost frame,
// or a register of code built without frame pointers).
static long walk_step(__u32 i, struct walk *w)
{
	__u32 at = (i + 1) & 127;
	if (i + 1 >= MAX_FRAMES) {
		w->deep = 1;
		return 1;
	}
	if (!w->fp) {
		w->whole = 1; // the outermost frame clears it
		return 1;
	}
	if (w->fp < w->lo || w->fp - w->lo > MAX_STACK_SPAN || w->fp & 7)
		return 1;
	// The saved frame pointer and the return address, from the window
	// (which it leaves for the frame when it is not there).
	__u64 off = w->fp - w->wbase;
	if (w->fp < w->wbase || off + 16 > w->wlen) {
		load_window(w, w->fp, 16);
		off = 0;
	}
	if (off + 16 > w->wlen)
		return 1;
	__u32 k = (off >> 3) & (WINDOW / 8 - 1);
	__u64 fp = w->win[k], ret = w->win[k + 1];
	if (!ret) {
		w->whole = 1;
		return 1;
	}
	w->same &= w->s->ip[at] == ret;
	w->s->ip[at] = ret;
	w->hash = mix(w->hash, ret);
	w->n = at + 1;
	w->lo = w->fp + 16;
	w->fp = fp;
	return 0;
}

// wread reads the 8-byte-aligned word at addr of the user stack, from the
// window (which it moves to addr when addr is not in it).
static __always_inline int wread(struct walk *w, __u64 addr, __u64 *v)
{
	if (addr & 7)
		return -1;
	__u64 off = addr - w->wbase;
	if (addr < w->wbase || off + 8 > w->wlen) {
		load_window(w, addr, 8);
		off = 0;
	}
	if (off + 8 > w->wlen)
		return -1;
	*v = w->win[(off >> 3) & (WINDOW / 8 - 1)];
	return 0;
}

// uw_find returns the table entry for pc (a caller's: pc - 1 is looked up)
// in the process's ranges: 0 (fallback) where a table has no rule, and
// UW_NOTABLE where no table covers pc (a file without one, code not in a
// file).
__noinline __u64 uw_find(struct uw_proc *p, __u64 pc)
{
	if (!p)
		return UW_NOTABLE;
	__u32 n = p->n;
	if (n == 0 || n > UW_MAX_RANGES)
		return UW_NOTABLE;
	// The last range with start <= pc.
	__u32 lo = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		__u32 half = n >> 1;
		if (n > 1) {
			__u32 mid = (lo + half) & (UW_MAX_RANGES - 1);
			if (p->r[mid].start <= pc)
				lo = mid;
			n -= half;
		}
	}
	struct uw_range *r = &p->r[lo & (UW_MAX_RANGES - 1)];
	if (pc < r->start || pc >= r->end || r->count < 2)
		return UW_NOTABLE; // a file without a table has a range of count 0
	__u64 a = pc - r->bias;
	if (a >> 32)
		return 0;
	__u32 ci = r->chunk;
	void *chunk = bpf_map_lookup_elem(&uw_chunks, &ci);
	if (!chunk)
		return UW_NOTABLE; // freed meanwhile
	// The last entry with addr <= a.
	__u32 first = r->first, cnt = r->count, at = first;
	__u64 *e = bpf_map_lookup_elem(chunk, &at);
	if (!e || (__u32)*e > a)
		return 0;
#pragma unroll
	for (int i = 0; i < UW_SEARCH_STEPS; i++) {
		__u32 half = cnt >> 1;
		if (cnt > 1) {
			__u32 mid = at + half;
			e = bpf_map_lookup_elem(chunk, &mid);
			if (!e)
				return 0;
			if ((__u32)*e <= a)
				at = mid;
			cnt -= half;
		}
	}
	if (at == first + r->count - 1)
		return 0; // the end marker: past the covered range
	e = bpf_map_lookup_elem(chunk, &at);
	return e ? *e : 0;
}

// uw_step unwinds one frame with the tables, or by the frame pointer where
// they have no rule: from the frame of return address w->pc (stack pointer
// w->lo, rbp w->fp) to its caller's.
static long uw_step(__u32 i, struct walk *w)
{
	__u32 at = (i + 1) & 127;
	if (i + 1 >= MAX_FRAMES) {
		w->deep = 1;
		return 1;
	}
	// A frame of the thread's last stack, with all those before it the
	// same: its rule is the one found then.
	__u64 e;
	if (w->reuse && w->same) {
		e = w->rules[i & 127];
	} else {
		e = uw_find(w->uw, w->pc - 1);
		w->rules[i & 127] = e;
	}
	__u8 kind = e >> 48;
	__u64 off = (e >> 32) & 0xffff;
	__s8 aux = e >> 56;
	__u64 cfa, ret = 0, fp = w->fp;
	switch (kind) {
	case UW_KIND_END:
		w->whole = 1;
		return 1;
	case UW_KIND_RSP:
		cfa = w->lo + off;
		break;
	case UW_KIND_RBP:
		cfa = w->fp + off;
		break;
	case UW_KIND_PLT:
		cfa = w->lo + off + ((w->pc & 15) >= (__u8)aux ? 8 : 0);
		aux = 0;
		break;
	case UW_KIND_NOTABLE:
		w->notable = 1;
		// fall through
	default:
		// No rule: the frame pointer, if it is one (above the stack
		// pointer, within the stack; 0 in the outermost frame).
		count(CTR_UW_FALLBACK);
		if (!w->fp) {
			w->whole = 1;
			return 1;
		}
		if (w->fp < w->lo || w->fp - w->lo > MAX_STACK_SPAN)
			return 1;
		cfa = w->fp + 16;
		aux = -2;
	}
	if (cfa <= w->lo || cfa - w->lo > MAX_STACK_SPAN)
		return 1; // a caller's frame is above its callee's
	if (wread(w, cfa - 8, &ret))
		return 1;
	if (!ret) {
		w->whole = 1;
		return 1;
	}
	if (aux && wread(w, cfa + (__s64)aux * 8, &fp))
		return 1;
	w->same &= w->s->ip[at] == ret;
	w->s->ip[at] = ret;
	w->hash = mix(w->hash, ret);
	w->n = at + 1;
	w->pc = ret;
	w->lo = cfa;
	w->fp = fp;
	return 0;
}

// same_step compares frame i of the new stack with the stored one.
static long same_step(__u32 i, struct walk *w)
{
	i &= 127;
	__u64 want = i < w->n ? w->s->ip[i] : 0;
	if (w->old->ip[i] != want) {
		w->n = 0; // differs
		return 1;
	}
	return 0;
}

// stack_end counts how a stored stack's walk ended, when it did not reach
// the thread's first frame. A walk by frame pointer alone cannot tell
// (the C library's first frames have none): only a walk with tables is
// judged, whose tables mark the outermost frames.
static __always_inline void stack_end(struct walk *w)
{
	if (w->deep) {
		count(CTR_STACKS_CUT);
	} else if (!w->whole && w->uw) {
		count(CTR_STACKS_BROKEN);
		if (w->notable)
			count(CTR_STACKS_NOTABLE);
	}
}

// take_stack returns the key of the current user stack, walking the frame
// pointers from fp, above stack pointer sp. Its innermost frame (the return
// address into the allocator's caller) is first, or if first is 0 the word
// at ret, where the stack pointer was at the function's entry. It puts the
// stack together in the thread's scratch (per thread, not per CPU: a
// uprobe's program can be preempted by another thread's), where the last
// one stays: a stack the same as the thread's last needs no look-up. The
// key is a hash of the frames seeded with the process (stacks are scoped
// by process: one stack of two processes is two keys). It returns NO_STACK
// when the stack cannot be stored (the map is full, or another stack has
// its hash), after counting it lost. The loops are bpf_loop callbacks: the
// verifier checks each body once, and take_stack itself is a global
// function, checked once rather than where each program calls it.
__noinline __u64 take_stack(struct thread *t, __u64 first, __u64 fp, __u64 sp, __u64 ret)
{
	if (!t)
		return NO_STACK;
	struct stack *s = &t->scratch;
	struct walk w = {.s = s, .win = t->window, .fp = fp, .lo = sp, .n = 1};
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	// One read for the return address and, usually, the first frames.
	load_window(&w, first ? sp : ret, 8);
	// The caller's stack pointer: at a return, sp; at an entry, above
	// the return address.
	__u64 csp = first ? sp : ret + 8;
	if (!first && w.wlen >= 8)
		first = t->window[0];
	w.same = t->last_stack != NO_STACK && s->ip[0] == first;
	s->ip[0] = first;
	w.hash = mix(0x9E3779B97F4A7C15ULL ^ tgid, first);
	if (uw)
		w.uw = bpf_map_lookup_elem(&uw_procs, &tgid);
	if (w.uw) {
		w.pc = first;
		w.lo = csp;
		w.rules = t->rules;
		__u32 gen = w.uw->gen;
		w.reuse = t->rules_gen == gen;
		bpf_loop(MAX_FRAMES - 1, uw_step, &w, 0);
		t->rules_gen = gen;
	} else {
		bpf_loop(MAX_FRAMES - 1, walk_step, &w, 0);
	}
	// The loop ends after MAX_FRAMES - 1 steps: a stack that filled them
	// may go on.
	if (!w.whole && w.n >= MAX_FRAMES)
		w.deep = 1;
	__u32 n = w.n & 127;
	s->ip[n] = 0;
	if (w.same && n == t->last_n) {
		stack_end(&w);
		return t->last_stack; // stored, and checked, when it was taken
	}
	t->last_stack = NO_STACK;
	t->last_n = n;
	__u64 h = w.hash;
	if (h == NO_STACK)
		h = 1;

	if (bpf_map_lookup_elem(&known, &h)) {
		// User space has it.
		stack_end(&w);
		t->last_stack = h;
		return h;
	}
	struct stack *old = bpf_map_lookup_elem(&stacks, &h);
	if (old) {
		w.old = old;
		bpf_loop(n + 1, same_step, &w, 0); // the frames and the end
		if (w.n == 0) { // a different stack with the same hash
			count(CTR_STACKS_LOST);
			return NO_STACK;
		}
		stack_end(&w);
		t->last_stack = h;
		return h;
	}
	long err = bpf_map_update_elem(&stacks, &h, s, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU stored it */) {
		count(CTR_STACKS_LOST);
		return NO_STACK;
	}
	if (!err)
		count(CTR_STACKS_STORED);
	stack_end(&w);
	t->last_stack = h;
	return h;
}

// --- aggregate mode ---

// fmix64 is MurmurHash3's finalizer: block addresses differ in few bits.
static __always_inline __u64 fmix64(__u64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

// bucket_of returns the c'th (0 or 1) bucket of hash h.
static __always_inline struct bucket *bucket_of(void *keys, __u32 mask, __u64 h, int c, __u32 *index)
{
	*index = (c ? (__u32)(h >> 32) : (__u32)h) & mask;
	return bpf_map_lookup_elem(keys, index);
}

static __always_inline long find_in(void *keys, __u32 mask, __u64 key)
{
	__u64 h = fmix64(key);
	for (int c = 0; c < 2; c++) {
		__u32 bi;
		struct bucket *b = bucket_of(keys, mask, h, c, &bi);
		if (!b)
			return -1;
		for (__u32 i = 0; i < BUCKET_SLOTS; i++)
			if (b->key[i] == key)
				return bi * BUCKET_SLOTS + i;
	}
	return -1;
}

// free_slots counts a bucket's free slots without a branch (each would
// double the paths the verifier walks). The shift is in asm, or clang
// turns it back into a comparison and a branch.
static __always_inline __u64 free_slots(struct bucket *b)
{
	__u64 used = 0;
	for (__u32 i = 0; i < BUCKET_SLOTS; i++) {
		__u64 k = b->key[i];
		__u64 nz = k | -k;
		asm volatile("%0 >>= 63" : "+r"(nz)); // 1 unless k is 0
		used += nz;
	}
	return BUCKET_SLOTS - used;
}

static __always_inline long claim_in(struct bucket *b, __u32 bi, __u64 key)
{
	for (__u32 i = 0; i < BUCKET_SLOTS; i++)
		if (b->key[i] == 0 && __sync_val_compare_and_swap(&b->key[i], 0, key | KEY_BUSY) == 0)
			return bi * BUCKET_SLOTS + i;
	return -1;
}

// The emptier bucket first keeps a table from overflowing until it is
// about three quarters full (the first bucket first would at a third).
static __always_inline long claim(void *keys, __u32 mask, __u64 key)
{
	__u64 h = fmix64(key);
	__u32 i0, i1;
	struct bucket *b0 = bucket_of(keys, mask, h, 0, &i0);
	struct bucket *b1 = bucket_of(keys, mask, h, 1, &i1);
	if (!b0 || !b1)
		return -1;
	long n = -1;
	if (free_slots(b1) > free_slots(b0))
		n = claim_in(b1, i1, key);
	if (n < 0)
		n = claim_in(b0, i0, key);
	if (n < 0)
		n = claim_in(b1, i1, key);
	return n;
}

// The table operations are global functions, which the verifier checks
// once each: inlined, their paths multiply at every call.

// live_find returns the slot of key in the live table, or -1.
__noinline long live_find(__u64 key) { return find_in(&live_keys, live_mask, key); }

// live_claim takes a free slot for key in the live table, marked busy
// until publish, or returns -1 if both its buckets are full.
__noinline long live_claim(__u64 key) { return claim(&live_keys, live_mask, key); }

__noinline long totals_find(__u64 key) { return find_in(&totals_keys, totals_mask, key); }

__noinline long totals_claim(__u64 key) { return claim(&totals_keys, totals_mask, key); }

// set_key stores the key of slot n. publish (with a busy slot's key
// without KEY_BUSY) ends the filling in of a claimed slot, which readers
// (user space) skip: they never see a key with an old value. Storing 0
// frees a slot.
static __always_inline void set_key(void *keys, long n, __u64 key)
{
	__u32 bi = (__u64)n / BUCKET_SLOTS;
	struct bucket *b = bpf_map_lookup_elem(keys, &bi);
	if (!b)
		return;
	asm volatile("" ::: "memory"); // the value's stores first (x86 keeps their order)
	b->key[n & (BUCKET_SLOTS - 1)] = key;
}

// total_of returns the totals of stack in process pidx, adding them to the
// table the first time. Two threads adding the same at once take two
// slots, which user space sums. Another stack with the same key (a 2^-63
// chance) is a map full.
static __always_inline struct total_val *total_of(__u32 pidx, __u64 stack)
{
	__u64 key = fmix64(stack ^ ((__u64)pidx << 48) ^ 0x9E3779B97F4A7C15ULL) & ~KEY_BUSY;
	if (!key)
		key = 1;
	struct total_val *tv;
	long n = totals_find(key);
	if (n >= 0) {
		__u32 i = n;
		tv = bpf_map_lookup_elem(&totals_vals, &i);
		if (!tv || tv->pidx != pidx || tv->stack != stack)
			return 0;
		return tv;
	}
	n = totals_claim(key);
	if (n < 0)
		return 0;
	__u32 i = n;
	tv = bpf_map_lookup_elem(&totals_vals, &i);
	if (!tv) {
		set_key(&totals_keys, n, 0);
		return 0;
	}
	tv->allocs = 0;
	tv->alloc_bytes = 0;
	tv->stack = stack;
	tv->pidx = pidx;
	set_key(&totals_keys, n, key);
	return tv;
}

// --- sampling weights ---
//
// In aggregate mode with sampling (sample_rate R > 0) a sampled block of S
// bytes stands for S/p bytes and 1/p objects, p = 1 - e^(-S/R), the
// probability that it was sampled. The kernel keeps per-stack sums, so the
// weights are added here, per block, before they are summed (a sum of sizes
// cannot be unbiased afterwards: the weight is not linear in S), and the
// block remembers them so that its free takes away what it added.
//
// No floating point in BPF: with x = S/R in 32.32 fixed point,
// q = p/x = (1 - e^-x)/x, then S/p = R/q and 1/p = R/(S q). For x < 1/16,
// q is the series 1 - x/2 + x^2/6 - x^3/24 + x^4/120 (the next term is
// below 2e-9); above, e^-x = 2^-(x log2 e) from its 24 fraction bits, one
// multiply by 2^(-2^-i) in 1.31 fixed point per bit. x beyond 32 counts the
// block as itself (p = 1 - 1.3e-14). Both weights come out with 16
// fraction bits, within 2e-5 of exact (measured against math.Expm1 by
// TestSampleWeightsBPF, over sizes 1 to 2^46 and rates 1 to 2^40), and are
// rounded up or down at random with the probability of the fraction, so
// that the sums stay whole and unbiased.

#define FX_ONE31 (1ULL << 31)
#define LOG2E_26 96817625ULL // log2(e) in 6.26 fixed point

// exp2_frac is 2^(-2^-(i+1)) in 1.31 fixed point.
static __always_inline __u64 exp2_frac(int i)
{
	switch (i) {
	case 0: return 1518500250ULL;
	case 1: return 1805811301ULL;
	case 2: return 1969251188ULL;
	case 3: return 2056437387ULL;
	case 4: return 2101467502ULL;
	case 5: return 2124350982ULL;
	case 6: return 2135885998ULL;
	case 7: return 2141676973ULL;
	case 8: return 2144578345ULL;
	case 9: return 2146030505ULL;
	case 10: return 2146756953ULL;
	case 11: return 2147120270ULL;
	case 12: return 2147301951ULL;
	case 13: return 2147392798ULL;
	case 14: return 2147438222ULL;
	case 15: return 2147460935ULL;
	case 16: return 2147472292ULL;
	case 17: return 2147477970ULL;
	case 18: return 2147480809ULL;
	case 19: return 2147482228ULL;
	case 20: return 2147482938ULL;
	case 21: return 2147483293ULL;
	case 22: return 2147483471ULL;
	}
	return 2147483559ULL;
}

// exp_neg_fx returns e^-x in 1.31 fixed point, for x in 32.32 below 32.
static __always_inline __u64 exp_neg_fx(__u64 x)
{
	__u64 y = x * LOG2E_26 >> 26; // x log2 e, 32.32; x < 2^37: no overflow
	__u64 k = y >> 32, f = y >> 8 & 0xffffff;
	__u64 m = FX_ONE31;
#pragma unroll
	for (int i = 0; i < 24; i++) {
		__u64 bit = f >> (23 - i) & 1; // without a branch, as in neg_ln_fx
		m = m * (FX_ONE31 - bit * (FX_ONE31 - exp2_frac(i))) >> 31;
	}
	return m >> (k & 63);
}

// smp_q returns (1 - e^-x)/x in 32.32 fixed point, for x in 32.32 below
// 32: in (1/32, 1].
static __always_inline __u64 smp_q(__u64 x)
{
	if (x < (1ULL << 28)) {
		__u64 x2 = x * x >> 32, x3 = x2 * x >> 32, x4 = x3 * x >> 32;
		return (1ULL << 32) - x / 2 + x2 / 6 - x3 / 24 + x4 / 120;
	}
	__u64 p = FX_ONE31 - exp_neg_fx(x); // 1 - e^-x, 1.31, at least 0.06
	return (p << 29) / (x >> 4);
}

// smp_weights_fx sets *b and *o to the bytes and objects a sampled block
// of size bytes stands for at rate r (1 <= r <= 2^40), with 16 fraction
// bits.
static __always_inline void smp_weights_fx(__u64 size, __u64 r, __u64 *b, __u64 *o)
{
	if (!size) { // never sampled; stands for itself
		*b = 0;
		*o = 1 << 16;
		return;
	}
	if (size >= 32 * r) {
		*b = size << 16; // sizes that large failed: no block
		*o = 1 << 16;
		return;
	}
	// size < 32 r <= 2^45. x's error, 2^-18 at worst, moves q by half that.
	__u64 x = size < (1ULL << 31) ? (size << 32) / r : ((size << 18) / r) << 14;
	__u64 q = smp_q(x); // above 2^27
	// R/q with 16 fraction bits is r 2^48 / q, which overflows as one
	// product: divide twice. R/q <= R + size < 2^46.
	__u64 a = r << 20;
	__u64 b16 = ((a / q) << 28) + (((a % q) << 28) / q);
	*b = b16;
	*o = b16 / size;
}

// smp_weights returns a sampled block's weights at the session's rate,
// each rounded at random to a whole number.
static __always_inline void smp_weights(__u64 size, __u64 *bytes, __u64 *objs)
{
	__u64 b, o;
	smp_weights_fx(size, sample_rate, &b, &o);
	__u32 rnd = bpf_get_prandom_u32();
	*bytes = (b >> 16) + ((rnd & 0xffff) < (b & 0xffff));
	*objs = (o >> 16) + ((rnd >> 16) < (o & 0xffff));
}

// For TestSampleWeightsBPF (the loader does not load it): the weights of
// one size and rate, unrounded.
struct weights_args {
	__u64 size, rate; // in
	__u64 bytes, objs; // out, 16 fraction bits
};

SEC("syscall")
int smp_weights_test(struct weights_args *a)
{
	__u64 b, o;
	smp_weights_fx(a->size, a->rate, &b, &o);
	a->bytes = b;
	a->objs = o;
	return 0;
}

// agg_alloc adds a block to the live table and its weights (*wb bytes, *wo
// objects) to its stack's totals: 0 (also for a failed allocation, which
// leaves nothing), 1 for a block it cannot key, -1 when a table has no room
// (the weights are set then too).
static __always_inline int agg_alloc(__u32 pidx, __u64 addr, __u64 size, __u64 stack, __u64 *wb, __u64 *wo)
{
	*wb = size;
	*wo = 1;
	if (!addr)
		return 0; // a failed allocation leaves nothing live
	if (addr & ~ADDR_MASK) {
		// Above 2^48 (only with 5-level page tables, when asked
		// for): no key for it.
		count(CTR_LOST_OTHER);
		return 1;
	}
	if (sample_rate)
		smp_weights(size, wb, wo);
	struct total_val *tv = total_of(pidx, stack);
	if (!tv)
		return -1;
	__u64 key = (__u64)pidx << PIDX_SHIFT | addr;
	long n = -1;
	if (!(families & FAMILY_FREE)) {
		// Frees are not traced: the block replaces the one that
		// was at its address. (With frees traced, an address is
		// not live twice.)
		n = live_find(key);
		if (n >= 0)
			set_key(&live_keys, n, key | KEY_BUSY);
	}
	if (n < 0)
		n = live_claim(key);
	if (n < 0)
		return -1;
	__u32 i = n;
	struct live_val *lv = bpf_map_lookup_elem(&live_vals, &i);
	if (!lv) {
		set_key(&live_keys, n, 0);
		return -1;
	}
	lv->size = size;
	lv->time = bpf_ktime_get_ns();
	lv->stack = stack;
	lv->wbytes = *wb;
	lv->wobjs = *wo;
	set_key(&live_keys, n, key);
	// Shared by CPUs, and the program may be preempted: atomics.
	__sync_fetch_and_add(&tv->allocs, *wo);
	__sync_fetch_and_add(&tv->alloc_bytes, *wb);
	return 0;
}

// agg_free removes a block from the live set: 0, or -1 when the table does
// not have it. What the stacks freed is not counted here: a block
// allocated while traced is either live or freed, so user space derives it
// from the totals and the live set.
static __always_inline int agg_free(__u32 pidx, __u64 addr)
{
	long n = live_find((__u64)pidx << PIDX_SHIFT | addr);
	if (n < 0)
		return -1;
	set_key(&live_keys, n, 0);
	return 0;
}

static __always_inline int spilled(__u32 pidx)
{
	__u8 *f = bpf_map_lookup_elem(&spilling, &pidx);
	return f && *f;
}

static __always_inline void send_event(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size,
				       __u64 old_addr, __u64 old_size, __u64 stack, __u8 spill, __u32 wobjs);

// agg_record accounts one call in the tables. What they cannot hold goes
// through the ring to user space, which keeps it (a spilled block, and the
// frees of a process that has spilled), rather than being lost: when not
// sampling, a table's size bounds only how much stays in the kernel.
static __always_inline void agg_record(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size,
				       __u64 old_addr, __u64 stack, __u32 pidx)
{
	__u8 spill = 0;
	int err = 0;
	__u64 wb = 0, wo = 0;
	switch (kind) {
	case KIND_ALLOC:
		err = agg_alloc(pidx, addr, size, stack, &wb, &wo);
		break;
	case KIND_FREE:
		if (agg_free(pidx, addr) < 0) {
			if (!sample_rate && spilled(pidx))
				spill = SPILL_OLD;
			else
				count(CTR_UNMATCHED);
		}
		break;
	case KIND_REALLOC:
		// realloc(p, n) that fails leaves p live; realloc(p, 0)
		// frees p and returns NULL.
		if (old_addr && (addr || !size) && agg_free(pidx, old_addr) < 0) {
			if (!sample_rate && spilled(pidx))
				spill = SPILL_OLD;
			else
				count(CTR_UNMATCHED);
		}
		err = agg_alloc(pidx, addr, size, stack, &wb, &wo);
		break;
	}
	if (err < 0 && !sample_rate) {
		__u8 one = 1;
		bpf_map_update_elem(&spilling, &pidx, &one, BPF_ANY);
		spill |= SPILL_NEW;
		err = 0;
	}
	if (err < 0)
		count(CTR_LOST_MAP_FULL);
	else if (spill)
		send_event(kind, func, heap, addr, size, old_addr, wb, stack, spill, (__u32)wo);
	else if (!err)
		count(CTR_DELIVERED);
}

// record sends one call to user space (stream) or into the tables
// (aggregate, where pidx is the process's index).
static __always_inline void record(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size,
				   __u64 old_addr, __u64 old_size, __u64 stack, __u32 pidx)
{
	if (aggregate)
		agg_record(kind, func, heap, addr, size, old_addr, stack, pidx);
	else
		send_event(kind, func, heap, addr, size, old_addr, old_size, stack, 0, 0);
}

// send_event puts one call in the ring.
static __always_inline void send_event(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size,
				       __u64 old_addr, __u64 old_size, __u64 stack, __u8 spill, __u32 wobjs)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	// Wake the consumer once each time the producer position enters a new
	// block of W bytes (a quarter of the ring), not for every event: a
	// wakeup is an inter-processor interrupt, which in a VM costs an exit.
	// The consumer sleeps only with the ring empty, so it is woken before
	// W bytes are queued. The position is read after the reservation and
	// the block claimed with a compare-and-swap, so that of CPUs reserving
	// at once exactly one wakes it. (Reading the queued bytes before the
	// reservation missed a crossing in nine, and races between CPUs more:
	// four missed in a row filled the ring while the consumer slept.)
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(CTR_LOST_RING_FULL);
		return;
	}
	__u64 wakeup = BPF_RB_NO_WAKEUP;
	__u64 block = bpf_ringbuf_query(&events, BPF_RB_PROD_POS) & wakeup_mask;
	__u64 last = wake_block;
	if (block != last && __sync_val_compare_and_swap(&wake_block, last, block) == last)
		wakeup = BPF_RB_FORCE_WAKEUP;
	e->time = bpf_ktime_get_ns();
	e->addr = addr;
	e->size = size;
	e->old_addr = old_addr;
	e->old_size = old_size;
	e->stack = stack;
	e->pid = tgid;
	e->tid = (__u32)id;
	e->kind = kind;
	e->func = func;
	e->heap = heap;
	e->spill = spill;
	e->wobjs = wobjs;
	bpf_ringbuf_submit(e, wakeup);
}

// --- sampling ---
//
// As the interposer does (internal/preload/csrc/sample.h): each thread
// counts down the bytes it allocates from a distance drawn from the
// exponential distribution of mean R; the allocation that takes the
// countdown to zero or below is sampled, and a new distance is drawn. An
// allocation of S bytes is sampled with probability 1 - exp(-S/R), which
// the analysis side unbiases. The decision is taken at the allocation's
// entry (the size is an argument): an allocation not sampled takes no
// stack and sends nothing; only its traps remain.

// neg_ln_fx returns -ln(v / 2^32) in 16.16 fixed point, for v in [1, 2^32].
// log2 v = e + log2 m with m = v / 2^e in [1, 2); the 16 bits of log2 m's
// fraction come from squaring m (each square that reaches 2 is a 1 bit).
// Truncation errs by less than 2^-16 in log2 and 2^-16 in the product
// with ln 2: -ln u is within 1.6e-5 of exact, and the mean distance within
// 1e-5 of R (the same arithmetic over 400000 draws in Python: largest error
// 1.52e-5, mean 2.3e-6 low). With u of 32 bits the distribution is cut at
// 22.2 R, a 2^-32 chance.
static __always_inline __u64 neg_ln_fx(__u64 v)
{
	__u64 e = 0, x = v;
	if (x >> 32) {
		x >>= 32;
		e += 32;
	}
	if (x >> 16) {
		x >>= 16;
		e += 16;
	}
	if (x >> 8) {
		x >>= 8;
		e += 8;
	}
	if (x >> 4) {
		x >>= 4;
		e += 4;
	}
	if (x >> 2) {
		x >>= 2;
		e += 2;
	}
	if (x >> 1)
		e += 1;
	// m in 1.31 fixed point: [2^31, 2^32).
	__u64 m = e <= 31 ? v << (31 - e) : v >> (e - 31);
	__u64 frac = 0;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		m = (m * m) >> 31;
		__u64 bit = m >> 32; // without a branch: 16 of them would be 2^16 paths to verify
		m >>= bit;
		frac = frac << 1 | bit;
	}
	__u64 nl2 = (32ULL << 16) - ((e << 16) | frac); // -log2 u, 16.16
	return nl2 * 2977044472ULL >> 32;            // ln 2 in 0.32 fixed point
}

// smp_next draws a distance from the exponential distribution of mean
// sample_rate, at least 1.
static __always_inline __s64 smp_next(void)
{
	__u64 v = (__u64)bpf_get_prandom_u32() + 1; // u = v / 2^32 in (0, 1]
	return (__s64)((neg_ln_fx(v) * sample_rate) >> 16) + 1; // < 2^21 * 2^40
}

// smp_draw counts an allocation of n bytes down the thread's countdown and
// returns whether it is sampled.
static __always_inline int smp_draw(struct thread *t, __u64 n)
{
	__s64 s = n > (1ULL << 62) ? (1LL << 62) : (__s64)n;
	if (!t->smp_init) {
		t->smp_init = 1;
		t->smp_left = smp_next();
	}
	t->smp_left -= s;
	if (t->smp_left > 0)
		return 0;
	t->smp_left = smp_next();
	return 1;
}

static __always_inline struct smp_key smp_key_of(__u64 addr)
{
	struct smp_key k = {.addr = addr, .pid = bpf_get_current_pid_tgid() >> 32};
	return k;
}

// smp_known returns whether addr is a sampled block of this process (of
// index pidx, in aggregate mode, whose live table holds exactly the sampled
// blocks: the sampled map is not used there).
static __always_inline int smp_known(__u64 addr, __u32 pidx)
{
	if (aggregate)
		return !(addr & ~ADDR_MASK) && live_find((__u64)pidx << PIDX_SHIFT | addr) >= 0;
	struct smp_key k = smp_key_of(addr);
	return bpf_map_lookup_elem(&sampled, &k) != 0;
}

// smp_forget takes addr out of the sampled blocks; 1 if it was there.
static __always_inline int smp_forget(__u64 addr)
{
	struct smp_key k = smp_key_of(addr);
	return bpf_map_delete_elem(&sampled, &k) == 0;
}

// smp_keep adds addr to the sampled blocks; 0, or an error when full.
static __always_inline long smp_keep(__u64 addr)
{
	struct smp_key k = smp_key_of(addr);
	__u8 one = 1;
	return bpf_map_update_elem(&sampled, &k, &one, BPF_ANY);
}

// --- allocation entry points (entry + return probes) ---

// mul_sat is a*b, or ~0 when that overflows (and calloc fails).
static __always_inline __u64 mul_sat(__u64 a, __u64 b)
{
	if (!((a | b) >> 32))
		return a * b;
	__u64 max = ~0ULL;
	// The barrier keeps clang from turning the division into a 128-bit
	// multiply, which BPF does not have.
	asm volatile("" : "+r"(max));
	if (a && b > max / a)
		return ~0ULL;
	return a * b;
}

static __always_inline int do_alloc_enter(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 func = COOKIE_FUNC(cookie);
	__u64 sp = PT_REGS_SP(ctx) + COOKIE_SP(cookie);

	struct thread *t = thread_state(1);
	if (!t) {
		// The call cannot be followed to its return: lost.
		if (families & family_of(func))
			count(CTR_LOST_MAP_FULL);
		return 0;
	}
	if (t->state == STATE_ALLOC) {
		if (sp <= t->sp) {
			// Called by a traced allocation (realloc(NULL, n) jumps
			// to malloc): that outer call is the event, but the block
			// comes from the inner allocator (glibc's reallocarray
			// calling jemalloc's realloc).
			t->depth++;
			t->heap = COOKIE_HEAP(cookie);
			return 0;
		}
		// Shallower than an allocation whose return never came.
		count(CTR_LOST_OTHER);
	}

	__u8 report = func;
	if (t->state == STATE_NEW && sp <= t->sp) {
		// operator new calling malloc: one event, new's, with the
		// stack new's entry took.
		report = t->func;
	} else {
		if (!(families & family_of(func))) {
			t->state = STATE_IDLE;
			return 0;
		}
		t->stack = NO_STACK;
		t->a0 = 0;
		t->sp = sp;
	}

	__u64 size = 0, arg = 0;
	__u64 p1 = PT_REGS_PARM1(ctx), p2 = PT_REGS_PARM2(ctx), p3 = PT_REGS_PARM3(ctx);
	switch (func) {
	case FUNC_CALLOC:
		size = mul_sat(p1, p2);
		break;
	case FUNC_REALLOC:
		arg = p1;
		size = p2;
		break;
	case FUNC_REALLOCARRAY:
		arg = p1;
		size = mul_sat(p2, p3);
		break;
	case FUNC_POSIX_MEMALIGN:
		arg = p1; // where the block is stored
		size = p3;
		break;
	case FUNC_ALIGNED_ALLOC:
	case FUNC_MEMALIGN:
		size = p2;
		break;
	default: // malloc, valloc, pvalloc
		size = p1;
	}
	if (report != func)
		size = t->a0; // the size asked of operator new

	__u8 smp = SMP_NEW;
	if (sample_rate) {
		if (report != func) {
			smp = t->smp; // drawn at operator new's entry
		} else {
			// Every result is a new draw at its size, a realloc's too
			// (the rule of csrc/sample.h in internal/preload); a
			// sampled old block leaves the set before it can be
			// reused (aggregate: at the return).
			int was = (func == FUNC_REALLOC || func == FUNC_REALLOCARRAY) && arg &&
				  (aggregate ? smp_known(arg, COOKIE_PIDX(cookie)) : smp_forget(arg));
			if (smp_draw(t, size))
				smp = was ? SMP_WAS : SMP_NEW;
			else
				smp = was ? SMP_DROP : SMP_SKIP;
		}
	}
	t->smp = smp;
	t->state = STATE_ALLOC;
	t->func = report;
	t->inner = func;
	t->heap = COOKIE_HEAP(cookie);
	t->pidx = COOKIE_PIDX(cookie);
	t->depth = 0;
	t->a0 = size;
	t->a1 = arg;
	return 0;
}

static __always_inline int do_alloc_exit(struct pt_regs *ctx)
{
	struct thread *t = thread_state(0);
	if (!t || t->state != STATE_ALLOC)
		return 0;
	if (t->depth) {
		t->depth--;
		return 0;
	}
	t->state = STATE_IDLE;

	__u64 ret = PT_REGS_RC(ctx);
	__u64 addr = ret;
	if (t->inner == FUNC_POSIX_MEMALIGN)
		addr = (__u32)ret == 0 ? read_user_u64(t->a1) : 0;

	__u8 kind = KIND_ALLOC;
	__u64 old = 0;
	if (t->inner == FUNC_REALLOC || t->inner == FUNC_REALLOCARRAY) {
		kind = KIND_REALLOC;
		old = t->a1;
	}
	if (sample_rate) {
		__u8 smp = t->smp;
		if (smp == SMP_SKIP)
			return 0;
		if (smp == SMP_DROP) {
			// The old block leaves the sample: its free, unless
			// the realloc failed and left it live (and sampled).
			if (!addr && t->a0) {
				if (!aggregate && smp_keep(old))
					count(CTR_LOST_MAP_FULL);
				return 0;
			}
			__u64 fstack = wants_stack(KIND_FREE)
					       ? take_stack(t, PT_REGS_IP(ctx), PT_REGS_FP(ctx), PT_REGS_SP(ctx), 0)
					       : NO_STACK;
			record(KIND_FREE, FUNC_FREE, t->heap, old, 0, 0, 0, fstack, t->pidx);
			return 0;
		}
		if (smp == SMP_NEW) {
			// Recorded as a new block (a realloc's old block was not
			// recorded, nor will its free be); a failed allocation
			// makes no block and is not recorded.
			old = 0;
			if (!addr)
				return 0;
		}
		// The block that is live after the call: the new one, or a
		// failed realloc's old one (realloc(p, 0) leaves none).
		__u64 live = addr ? addr : (t->a0 ? old : 0);
		if (!aggregate && live && smp_keep(live)) { // aggregate: the live table is the set
			count(CTR_LOST_MAP_FULL);
			if (smp == SMP_NEW)
				return 0; // its free could not be told: not recorded
		}
	}
	// At the return the frame pointer is the caller's again: the walk
	// from the return address is complete.
	__u64 stack = t->stack;
	if (t->func == t->inner)
		stack = wants_stack(kind) ? take_stack(t, PT_REGS_IP(ctx), PT_REGS_FP(ctx), PT_REGS_SP(ctx), 0)
					  : NO_STACK;
	record(kind, t->func, t->heap, addr, t->a0, old, 0, stack, t->pidx);
	return 0;
}

SEC("uprobe.multi")
int alloc_enter_multi(struct pt_regs *ctx) { return do_alloc_enter(ctx); }

SEC("uretprobe.multi")
int alloc_exit_multi(struct pt_regs *ctx) { return do_alloc_exit(ctx); }

SEC("uprobe")
int alloc_enter(struct pt_regs *ctx) { return do_alloc_enter(ctx); }

SEC("uretprobe")
int alloc_exit(struct pt_regs *ctx) { return do_alloc_exit(ctx); }

// --- free (entry probe only) ---

// note_delete follows an operator delete probed as a free (an allocator's
// own, like jemalloc's or tcmalloc's, rather than the C++ runtime's wrapper
// of free): it is the event, and the free it may call with the same block
// is not another.
static __always_inline void note_delete(struct thread *t, __u64 sp, __u64 ptr)
{
	if (!t)
		t = thread_state(1);
	if (!t)
		return;
	t->state = STATE_FREED;
	t->sp = sp;
	t->a0 = ptr;
}

static __always_inline int do_free(struct pt_regs *ctx)
{
	__u64 ptr = PT_REGS_PARM1(ctx);
	if (!ptr)
		return 0; // free(NULL) does nothing; the placement usually skips it
	__u64 cookie = bpf_get_attach_cookie(ctx);
	// Not a sampled block: nothing to record, after one lookup. (Nor is
	// the free an operator delete that reported the block calls: the
	// block left the set then, so delete leaves no note when sampling.)
	if (sample_rate && !smp_known(ptr, COOKIE_PIDX(cookie)))
		return 0;
	__u8 func = COOKIE_FUNC(cookie);
	__u64 sp = PT_REGS_SP(ctx) + COOKIE_SP(cookie);
	__u64 stack = NO_STACK;
	int own = 1; // the stack is free's, not delete's

	__u32 wi = COOKIE_WINDOW(cookie);
	if (wi) {
		// At the entry sp points at the return address; the probe may
		// be past the entry, by COOKIE_SP.
		struct window *w = bpf_map_lookup_elem(&internal_frees, &wi);
		__s64 rel = (__s64)(read_user_u64(sp) - PT_REGS_IP(ctx));
		for (int i = 0; w && i < WINDOW_RANGES; i++)
			if (rel >= w->lo[i] && rel < w->hi[i])
				return 0; // glibc freeing its own, at a thread's exit
	}

	struct thread *t = thread_state(0);
	if (t && t->state == STATE_ALLOC && sp <= t->sp)
		return 0; // realloc(p, 0) freeing p: part of the realloc event
	if (t && t->state == STATE_FREED && sp <= t->sp && t->a0 == ptr) {
		t->state = STATE_IDLE;
		return 0; // the free an operator delete reported already calls
	}
	if (t && t->state == STATE_DELETE && sp <= t->sp && t->a0 == ptr) {
		func = t->func;
		stack = t->stack;
		own = 0;
		t->state = STATE_IDLE;
	} else if (!(families & family_of(func))) {
		return 0;
	}
	if (own && wants_stack(KIND_FREE)) {
		// Near its entry, free has set up no frame: the frame pointer
		// is still its caller's, and the return address into the
		// caller is where the stack pointer was at the entry.
		if (!t)
			t = thread_state(1);
		if (t)
			stack = take_stack(t, 0, PT_REGS_FP(ctx), PT_REGS_SP(ctx), sp);
		else
			count(CTR_STACKS_LOST);
	}
	if (sample_rate && !aggregate)
		smp_forget(ptr);
	record(KIND_FREE, func, COOKIE_HEAP(cookie), ptr, 0, 0, 0, stack, COOKIE_PIDX(cookie));
	if (own && func != FUNC_FREE && !sample_rate)
		note_delete(t, sp, ptr);
	return 0;
}

SEC("uprobe.multi")
int free_enter_multi(struct pt_regs *ctx) { return do_free(ctx); }

SEC("uprobe")
int free_enter(struct pt_regs *ctx) { return do_free(ctx); }

// --- operator new and delete (entry probe only) ---
//
// They call malloc and free (or aligned_alloc) to do the work. Their entry
// leaves a note in the thread's state; the allocator's probe sees it and
// reports one event under new's or delete's name, with the stack taken
// here, where it is complete.

static __always_inline int do_wrap(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 func = COOKIE_FUNC(cookie);
	__u64 sp = PT_REGS_SP(ctx) + COOKIE_SP(cookie);
	__u64 a = PT_REGS_PARM1(ctx);
	int is_new = func == FUNC_NEW || func == FUNC_NEW_ARRAY;
	if (!is_new && !a)
		return 0; // delete of NULL: free(NULL) follows, which is nothing
	if (!is_new && sample_rate && !smp_known(a, COOKIE_PIDX(cookie)))
		return 0; // not a sampled block: its free is not recorded either

	struct thread *t = thread_state(1);
	if (!t)
		return 0; // the allocator's own probe will report the call
	if (t->state == STATE_ALLOC && sp <= t->sp)
		return 0;
	if (sp <= t->sp && ((is_new && t->state == STATE_NEW) || (!is_new && t->state == STATE_DELETE && t->a0 == a)))
		return 0; // new[] calling new: the outermost names the event

	t->state = is_new ? STATE_NEW : STATE_DELETE;
	t->func = func;
	t->sp = sp;
	t->a0 = a;
	__u8 kind = is_new ? KIND_ALLOC : KIND_FREE;
	t->stack = NO_STACK;
	t->smp = SMP_NEW;
	if (is_new && sample_rate && !smp_draw(t, a)) {
		t->smp = SMP_SKIP; // the malloc it calls records nothing
		return 0;
	}
	if (wants_stack(kind))
		t->stack = take_stack(t, 0, PT_REGS_FP(ctx), PT_REGS_SP(ctx), sp);
	return 0;
}

SEC("uprobe.multi")
int wrap_enter_multi(struct pt_regs *ctx) { return do_wrap(ctx); }

SEC("uprobe")
int wrap_enter(struct pt_regs *ctx) { return do_wrap(ctx); }

// --- the dynamic loader ---
//
// ld.so calls _dl_debug_state whenever its list of loaded objects changes
// (at start-up, before any constructor runs, and at dlopen and dlclose),
// for debuggers. A probe there sends the list, read from _r_debug (whose
// address is the cookie), so that user space learns where libraries are
// mapped even when the process is gone by the time it reads the events
// that need them.

// Unwind tables for libraries the loader maps. A process in dl_hold (its
// value: how many objects its list had at the last consistent state) is
// stopped when its list has become consistent with more objects than that,
// before their relocation and constructors have run, and a note tells user
// space, which loads the new files' tables and continues it. Without the
// stop the first stacks through a library mapped after attach (libc, at a
// launch) would be walked before its table is in.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 16384);
} dl_hold SEC(".maps");

#define RT_CONSISTENT 0

static __always_inline void hold_for_tables(__u32 tgid, __u64 r_debug, __u32 n)
{
	__u32 *last = bpf_map_lookup_elem(&dl_hold, &tgid);
	if (!last)
		return;
	__s32 state = -1;
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(r_debug + 24)) || state != RT_CONSISTENT)
		return; // r_state: the list is being changed
	__u32 before = *last;
	*last = n;
	if (n <= before)
		return; // nothing added (a dlclose, a dlopen of a loaded object)
	struct note *nt = bpf_ringbuf_reserve(&events, sizeof(*nt), 0);
	if (!nt) {
		count(CTR_LOST_OTHER);
		return;
	}
	nt->time = bpf_ktime_get_ns();
	nt->kind = NOTE_LIBS;
	nt->pid = tgid;
	nt->ppid = 0;
	// The current thread's process, from a uprobe: bpf_send_signal is
	// enough (no kfunc), and the stop takes effect before the loader's next
	// instruction.
	nt->held = bpf_send_signal(19 /* SIGSTOP */);
	bpf_ringbuf_submit(nt, BPF_RB_FORCE_WAKEUP);
}

static __always_inline int do_dl_state(struct pt_regs *ctx)
{
	__u64 r_debug = bpf_get_attach_cookie(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 lm = read_user_u64(r_debug + 8); // r_map
	__u32 n = 0;
	for (__u32 i = 0; i < MAX_LIBS && lm; i++) {
		struct lib *l = bpf_ringbuf_reserve(&events, sizeof(*l), 0);
		if (!l) {
			count(CTR_LIBS_LOST);
			return 0;
		}
		l->base = read_user_u64(lm); // l_addr
		l->pid = tgid;
		l->index = i;
		__u64 name = read_user_u64(lm + 8); // l_name
		if (bpf_probe_read_user_str(l->name, sizeof(l->name), (void *)name) < 0)
			l->name[0] = 0;
		bpf_ringbuf_submit(l, 0);
		lm = read_user_u64(lm + 24); // l_next
		n = i + 1;
	}
	hold_for_tables(tgid, r_debug, n);
	return 0;
}

SEC("uprobe.multi")
int dl_state_multi(struct pt_regs *ctx) { return do_dl_state(ctx); }

SEC("uprobe")
int dl_state(struct pt_regs *ctx) { return do_dl_state(ctx); }

// --- mmap, munmap, mremap ---

struct sys_enter_ctx {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

struct sys_exit_ctx {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

static __always_inline struct thread *syscall_thread(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	struct thread *t = thread_state(1);
	if (!t)
		count(CTR_LOST_MAP_FULL);
	return t;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int mmap_enter(struct sys_enter_ctx *ctx)
{
	if (!(ctx->args[3] & MAP_ANONYMOUS_))
		return 0;
	struct thread *t = syscall_thread();
	if (!t)
		return 0;
	t->sys = FUNC_MMAP;
	t->s_len = ctx->args[1];
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_munmap")
int munmap_enter(struct sys_enter_ctx *ctx)
{
	struct thread *t = syscall_thread();
	if (!t)
		return 0;
	t->sys = FUNC_MUNMAP;
	t->s_addr = ctx->args[0];
	t->s_len = ctx->args[1];
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mremap")
int mremap_enter(struct sys_enter_ctx *ctx)
{
	struct thread *t = syscall_thread();
	if (!t)
		return 0;
	t->sys = FUNC_MREMAP;
	t->s_addr = ctx->args[0];
	t->s_old_len = ctx->args[1];
	t->s_len = ctx->args[2];
	return 0;
}

// sys_stack takes the stack of a syscall of kind from the user registers.
// The syscall's libc wrapper sets up no frame: the walk misses its caller.
static __always_inline __u64 sys_stack(struct thread *t, __u8 kind)
{
	if (!wants_stack(kind))
		return NO_STACK;
	struct pt_regs *regs = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());
	__u64 ip = 0, fp = 0, sp = 0;
	if (bpf_probe_read_kernel(&ip, sizeof(ip), &regs->rip) || bpf_probe_read_kernel(&fp, sizeof(fp), &regs->rbp) ||
	    bpf_probe_read_kernel(&sp, sizeof(sp), &regs->rsp))
		return NO_STACK;
	return take_stack(t, ip, fp, sp, 0);
}

static __always_inline int do_sys_exit(struct sys_exit_ctx *ctx, __u8 func)
{
	struct thread *t = thread_state(0);
	if (!t || t->sys != func)
		return 0;
	t->sys = 0;
	__s64 ret = ctx->ret;
	int failed = ret < 0 && ret > -4096;
	switch (func) {
	case FUNC_MMAP:
		record(KIND_MMAP, func, HEAP_MMAP, failed ? 0 : ret, t->s_len, 0, 0, sys_stack(t, KIND_MMAP), 0);
		break;
	case FUNC_MUNMAP:
		if (!failed)
			record(KIND_MUNMAP, func, HEAP_MMAP, t->s_addr, t->s_len, 0, 0, sys_stack(t, KIND_MUNMAP), 0);
		break;
	case FUNC_MREMAP:
		record(KIND_REALLOC, func, HEAP_MMAP, failed ? 0 : ret, t->s_len, t->s_addr, t->s_old_len,
		       sys_stack(t, KIND_REALLOC), 0);
		break;
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int mmap_exit(struct sys_exit_ctx *ctx) { return do_sys_exit(ctx, FUNC_MMAP); }

SEC("tracepoint/syscalls/sys_exit_munmap")
int munmap_exit(struct sys_exit_ctx *ctx) { return do_sys_exit(ctx, FUNC_MUNMAP); }

SEC("tracepoint/syscalls/sys_exit_mremap")
int mremap_exit(struct sys_exit_ctx *ctx) { return do_sys_exit(ctx, FUNC_MREMAP); }

// --- children: fork and exec ---
//
// A followed process's fork adds the child to the followed (and, when the
// parent's mmap calls are traced, the traced) processes, and stops it
// before its first instruction; so does its exec, before the first
// instruction of the new program. User space attaches the probes for the
// child or the new program, which is only then continued: nothing it
// does is missed. (Probes are attached per process: the parent's do not
// run for its child.)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 16384);
} follow SEC(".maps");

// Only the fields used, relocated by CO-RE.
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

enum pid_type { PIDTYPE_PID, PIDTYPE_TGID };

extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type, __u64 value) __ksym;

#define SIGSTOP_ 19

// hold stops task's process and tells user space, or (the ring is full)
// does neither: a process not held is not followed.
static __always_inline int hold(struct task_struct *task, __u32 kind, __u32 pid, __u32 ppid)
{
	struct note *n = bpf_ringbuf_reserve(&events, sizeof(*n), 0);
	if (!n) {
		count(CTR_LOST_OTHER);
		return -1;
	}
	n->time = bpf_ktime_get_ns();
	n->kind = kind;
	n->pid = pid;
	n->ppid = ppid;
	n->held = bpf_send_signal_task(task, SIGSTOP_, PIDTYPE_TGID, 0);
	bpf_ringbuf_submit(n, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	if (child->pid != child->tgid)
		return 0; // a thread
	__u32 ptgid = parent->tgid, tgid = child->tgid;
	__u8 *f = bpf_map_lookup_elem(&follow, &ptgid);
	if (!f)
		return 0;
	// Before the note: user space may undo these as soon as it reads it.
	__u8 v = *f, one = 1;
	int mmaps = bpf_map_lookup_elem(&traced, &ptgid) != 0;
	bpf_map_update_elem(&follow, &tgid, &v, BPF_ANY);
	if (mmaps)
		bpf_map_update_elem(&traced, &tgid, &one, BPF_ANY);
	if (hold(child, NOTE_FORK, tgid, ptgid)) {
		bpf_map_delete_elem(&follow, &tgid);
		if (mmaps)
			bpf_map_delete_elem(&traced, &tgid);
	}
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, int old_pid, void *bprm)
{
	__u32 tgid = p->tgid;
	if (!bpf_map_lookup_elem(&follow, &tgid))
		return 0;
	hold(p, NOTE_EXEC, tgid, 0);
	return 0;
}

// Tracing through otel_memory USDT probes (Config.Source).
#include "usdt.bpf.h"

// Keep the record types in BTF for bpf2go.
const struct event *unused_event __attribute__((unused));
const struct lib *unused_lib __attribute__((unused));
const struct note *unused_note __attribute__((unused));
