// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): operator new and delete (entry probe only).

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
