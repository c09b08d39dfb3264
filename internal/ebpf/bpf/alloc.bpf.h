// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): the allocation entry points (entry and return probes).

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
