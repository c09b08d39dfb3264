// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): mmap, munmap, mremap.

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
int mmap_exit(struct sys_exit_ctx *ctx)
{
	return do_sys_exit(ctx, FUNC_MMAP);
}

SEC("tracepoint/syscalls/sys_exit_munmap")
int munmap_exit(struct sys_exit_ctx *ctx)
{
	return do_sys_exit(ctx, FUNC_MUNMAP);
}

SEC("tracepoint/syscalls/sys_exit_mremap")
int mremap_exit(struct sys_exit_ctx *ctx)
{
	return do_sys_exit(ctx, FUNC_MREMAP);
}
