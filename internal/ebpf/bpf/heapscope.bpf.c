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
volatile const __u64 wakeup_bytes = 1; // stream: wake the consumer once this much is queued

// Changed while tracing (SetStacks).
volatile __u8 stack_kinds; // 1 << KIND_*: kinds that carry a stack

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); // resized by the loader
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_FRAMES * sizeof(__u64));
	__uint(max_entries, 1 << 14); // resized by the loader
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, NUM_COUNTERS);
} counters SEC(".maps");

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

// Aggregate mode.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct live_key);
	__type(value, struct live_val);
	__uint(max_entries, 1 << 16); // resized by the loader
} live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct total_key);
	__type(value, struct total_val);
	__uint(max_entries, 1 << 14); // resized by the loader
} totals SEC(".maps");

struct task_struct;

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &i);
	if (v)
		*v += 1; // per CPU: no atomics needed
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

// take_stack returns the BPF stack id of the current user stack for an event
// of kind, NO_STACK when kind carries none, or NO_STACK after counting a
// stack lost (map full or a hash collision).
static __always_inline __s32 take_stack(void *ctx, __u8 kind)
{
	if (!(stack_kinds & (1 << kind)))
		return NO_STACK;
	long id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (id < 0) {
		count(CTR_STACKS_LOST);
		return NO_STACK;
	}
	return id;
}

static __always_inline __u64 read_user_u64(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

// --- aggregate mode ---

static __always_inline int agg_alloc(__u32 tgid, __u64 addr, __u64 size, __s32 stack, __u64 caller)
{
	if (!addr)
		return 0; // a failed allocation leaves nothing live
	struct total_key tk = {.tgid = tgid, .stack = stack, .caller = caller};
	struct total_val *tv = bpf_map_lookup_elem(&totals, &tk);
	if (!tv) {
		struct total_val zero = {};
		bpf_map_update_elem(&totals, &tk, &zero, BPF_NOEXIST);
		tv = bpf_map_lookup_elem(&totals, &tk);
		if (!tv)
			return -1;
	}
	struct live_key lk = {.tgid = tgid, .addr = addr};
	struct live_val lv = {.size = size, .time = bpf_ktime_get_ns(), .caller = caller, .stack = stack};
	if (bpf_map_update_elem(&live, &lk, &lv, BPF_ANY))
		return -1;
	tv->allocs++;
	tv->alloc_bytes += size;
	return 0;
}

static __always_inline void agg_free(__u32 tgid, __u64 addr)
{
	struct live_key lk = {.tgid = tgid, .addr = addr};
	struct live_val *lv = bpf_map_lookup_elem(&live, &lk);
	if (!lv) {
		count(CTR_UNMATCHED);
		return;
	}
	struct total_key tk = {.tgid = tgid, .stack = lv->stack, .caller = lv->caller};
	__u64 size = lv->size;
	bpf_map_delete_elem(&live, &lk);
	struct total_val *tv = bpf_map_lookup_elem(&totals, &tk);
	if (tv) {
		tv->frees++;
		tv->free_bytes += size;
	}
}

// record sends one call to user space (stream) or into the maps (aggregate).
static __always_inline void record(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size,
				   __u64 old_addr, __u64 old_size, __s32 stack, __u64 caller, __u8 flags)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (stack == NO_STACK)
		caller = 0;

	if (aggregate) {
		// The maps have no room for the flags: user addresses leave the
		// caller's top byte free.
		caller |= (__u64)flags << 56;
		int err = 0;
		switch (kind) {
		case KIND_ALLOC:
		case KIND_MMAP:
			err = agg_alloc(tgid, addr, size, stack, caller);
			break;
		case KIND_FREE:
		case KIND_MUNMAP:
			agg_free(tgid, addr);
			break;
		case KIND_REALLOC:
			// realloc(p, n) that fails leaves p live; realloc(p, 0)
			// frees p and returns NULL.
			if (old_addr && (addr || !size))
				agg_free(tgid, old_addr);
			err = agg_alloc(tgid, addr, size, stack, caller);
			break;
		}
		count(err ? CTR_LOST_MAP_FULL : CTR_DELIVERED);
		return;
	}

	__u64 wakeup = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + sizeof(struct event) >= wakeup_bytes)
		wakeup = BPF_RB_FORCE_WAKEUP;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(CTR_LOST_RING_FULL);
		return;
	}
	e->time = bpf_ktime_get_ns();
	e->addr = addr;
	e->size = size;
	e->old_addr = old_addr;
	e->old_size = old_size;
	e->caller = caller;
	e->pid = tgid;
	e->tid = (__u32)id;
	e->stack = stack;
	e->kind = kind;
	e->func = func;
	e->heap = heap;
	e->flags = flags;
	bpf_ringbuf_submit(e, wakeup);
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
			// to malloc): that outer call is the event.
			t->depth++;
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
		t->caller = 0;
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

	t->state = STATE_ALLOC;
	t->func = report;
	t->inner = func;
	t->heap = COOKIE_HEAP(cookie);
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
	__s32 stack = t->stack;
	__u64 caller = t->caller;
	__u8 flags = t->sflags;
	if (t->func == t->inner) {
		stack = take_stack(ctx, kind);
		flags = 0;
	}
	record(kind, t->func, t->heap, addr, t->a0, old, 0, stack, caller, flags);
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

static __always_inline int do_free(struct pt_regs *ctx)
{
	__u64 ptr = PT_REGS_PARM1(ctx);
	if (!ptr)
		return 0; // free(NULL) does nothing; the placement usually skips it
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 func = COOKIE_FUNC(cookie);
	__u64 sp = PT_REGS_SP(ctx) + COOKIE_SP(cookie);
	__s32 stack = STACK_UNSET;
	__u64 caller = 0;
	__u8 flags = COOKIE_FLAGS(cookie);

	struct thread *t = thread_state(0);
	if (t && t->state == STATE_ALLOC && sp <= t->sp)
		return 0; // realloc(p, 0) freeing p: part of the realloc event
	if (t && t->state == STATE_DELETE && sp <= t->sp && t->a0 == ptr) {
		func = t->func;
		stack = t->stack;
		caller = t->caller;
		flags = t->sflags;
		t->state = STATE_IDLE;
	} else if (!(families & FAMILY_FREE)) {
		return 0;
	}
	if (stack == STACK_UNSET) {
		stack = take_stack(ctx, KIND_FREE);
		// free does not set up a frame: the walk from its entry
		// misses the caller, whose return address is on top of the
		// stack.
		if (stack != NO_STACK)
			caller = read_user_u64(sp);
	}
	record(KIND_FREE, func, COOKIE_HEAP(cookie), ptr, 0, 0, 0, stack, caller, flags);
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
	t->stack = take_stack(ctx, is_new ? KIND_ALLOC : KIND_FREE);
	t->caller = t->stack == NO_STACK ? 0 : read_user_u64(sp);
	t->sflags = COOKIE_FLAGS(cookie);
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

static __always_inline int do_dl_state(struct pt_regs *ctx)
{
	__u64 r_debug = bpf_get_attach_cookie(ctx);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 lm = read_user_u64(r_debug + 8); // r_map
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
	}
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
		record(KIND_MMAP, func, HEAP_MMAP, failed ? 0 : ret, t->s_len, 0, 0,
		       take_stack(ctx, KIND_MMAP), 0, 0);
		break;
	case FUNC_MUNMAP:
		if (!failed)
			record(KIND_MUNMAP, func, HEAP_MMAP, t->s_addr, t->s_len, 0, 0,
			       take_stack(ctx, KIND_MUNMAP), 0, 0);
		break;
	case FUNC_MREMAP:
		record(KIND_REALLOC, func, HEAP_MMAP, failed ? 0 : ret, t->s_len, t->s_addr,
		       t->s_old_len, take_stack(ctx, KIND_REALLOC), 0, 0);
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

// Keep the record types in BTF for bpf2go.
const struct event *unused_event __attribute__((unused));
const struct lib *unused_lib __attribute__((unused));
