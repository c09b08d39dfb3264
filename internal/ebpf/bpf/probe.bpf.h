// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): one program for every allocator probe, dispatched by the role in its cookie.

//
// An allocation's entry and return, a free and an operator new or delete
// are one program, told apart by the probe's cookie (COOKIE_ROLE): the
// verifier checks the stack walk, which is most of its work, once rather
// than in each program that takes a stack, and loading takes a third of
// the time. A uretprobe is a uprobe program attached as a return probe.

static __always_inline int do_probe(struct pt_regs *ctx)
{
	switch (COOKIE_ROLE(bpf_get_attach_cookie(ctx))) {
	case ROLE_ALLOC_EXIT:
		return do_alloc_exit(ctx);
	case ROLE_FREE:
		return do_free(ctx);
	case ROLE_WRAP:
		return do_wrap(ctx);
	}
	return do_alloc_enter(ctx);
}

SEC("uprobe.multi")
int probe_multi(struct pt_regs *ctx)
{
	return do_probe(ctx);
}

SEC("uprobe")
int probe(struct pt_regs *ctx)
{
	return do_probe(ctx);
}
