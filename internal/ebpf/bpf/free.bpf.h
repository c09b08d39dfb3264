// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): free (entry probe only).

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
