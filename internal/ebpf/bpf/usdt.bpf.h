// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Tracing through OpenTelemetry's otel_memory USDT probes (Config.Source):
// a target that samples its own allocations fires
//   otel_memory:alloc(ptr, size, weight)  on each allocation it samples,
//   otel_memory:free(ptr)                 on the free of a sampled pointer,
// and these programs, on uprobes at the probes' sites (whose semaphores the
// kernel raises while they are attached, which turns the sampler on), send
// each as an event: an allocation of size bytes at ptr that stands for
// weight bytes (in the event's old_size, which an allocation has no other
// use for), and the free of ptr. The target decides what is sampled: calls
// it does not sample cost heapscope nothing.
//
// The arguments are where the probe's note says (<sys/sdt.h> lets the
// compiler choose: "8@%rbx 8@%r12 8@-8(%rbp)"), described per site in
// usdt_sites, indexed by the uprobe's cookie, as libbpf's usdt.bpf.h does.
//
// Part of heapscope.bpf.c: included at its end, after everything it uses
// (send_event, take_stack, thread_state, count). Stream mode only.

#define USDT_MAX_SITES 1024
#define USDT_ARGS 3

#define USDT_ARG_CONST 0 // the value itself
#define USDT_ARG_REG 1   // a register, at its offset in struct pt_regs
#define USDT_ARG_MEM 2   // memory at a register plus an offset

struct usdt_arg {
	__u64 val; // USDT_ARG_CONST: the value; else the register's offset in struct pt_regs
	__s64 off; // USDT_ARG_MEM: added to the register
	__u8 kind; // USDT_ARG_*
	__u8 shift; // 64 - 8 * the argument's size: the bits above it are not the argument's
	__u8 sign;  // the argument is signed: sign-extended from its size
	__u8 pad[5];
};

struct usdt_site {
	struct usdt_arg arg[USDT_ARGS]; // alloc: ptr, size, weight; free: ptr
	__u8 heap; // event.Heap of the file the probe is in
	__u8 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct usdt_site);
	__uint(max_entries, USDT_MAX_SITES);
} usdt_sites SEC(".maps");

// usdt_arg reads argument a of the probe that fired; 0, or -1 when it
// could not be read.
static __always_inline int usdt_arg(struct pt_regs *ctx, struct usdt_arg *a, __u64 *out)
{
	__u64 v = 0;
	// A field of struct pt_regs (168 bytes): bounded, which the verifier
	// needs of an offset from ctx, and read as kernel memory.
	__u32 reg = (__u32)a->val & 0xff;
	switch (a->kind) {
	case USDT_ARG_CONST:
		v = a->val;
		break;
	case USDT_ARG_REG:
		if (bpf_probe_read_kernel(&v, sizeof(v), (void *)ctx + reg))
			return -1;
		break;
	case USDT_ARG_MEM:
		if (bpf_probe_read_kernel(&v, sizeof(v), (void *)ctx + reg))
			return -1;
		// Eight bytes, little-endian: the argument is in the low ones.
		if (bpf_probe_read_user(&v, sizeof(v), (void *)(v + a->off)))
			return -1;
		break;
	default:
		return -1;
	}
	__u8 sh = a->shift & 63;
	v <<= sh;
	if (a->sign)
		v = (__u64)((__s64)v >> sh);
	else
		v >>= sh;
	*out = v;
	return 0;
}

// usdt_stack is the stack at the probe: its site is the first frame.
static __always_inline __u64 usdt_stack(struct pt_regs *ctx, __u8 kind)
{
	if (!wants_stack(kind))
		return NO_STACK;
	struct thread *t = thread_state(1);
	if (!t) {
		count(CTR_STACKS_LOST);
		return NO_STACK;
	}
	return take_stack(t, PT_REGS_IP(ctx), PT_REGS_FP(ctx), PT_REGS_SP(ctx), 0);
}

SEC("uprobe")
int usdt_alloc(struct pt_regs *ctx)
{
	__u32 i = (__u32)bpf_get_attach_cookie(ctx);
	struct usdt_site *s = bpf_map_lookup_elem(&usdt_sites, &i);
	if (!s)
		return 0;
	__u64 ptr = 0, size = 0, weight = 0;
	if (usdt_arg(ctx, &s->arg[0], &ptr) || usdt_arg(ctx, &s->arg[1], &size) || usdt_arg(ctx, &s->arg[2], &weight)) {
		count(CTR_LOST_OTHER);
		return 0;
	}
	if (!ptr)
		return 0;
	// A sample stands for at least a byte (0 would mean: weighed by the
	// trace's rate).
	if (!weight)
		weight = 1;
	send_event(KIND_ALLOC, 0, s->heap, ptr, size, 0, weight, usdt_stack(ctx, KIND_ALLOC), 0, 0);
	return 0;
}

SEC("uprobe")
int usdt_free(struct pt_regs *ctx)
{
	__u32 i = (__u32)bpf_get_attach_cookie(ctx);
	struct usdt_site *s = bpf_map_lookup_elem(&usdt_sites, &i);
	if (!s)
		return 0;
	__u64 ptr = 0;
	if (usdt_arg(ctx, &s->arg[0], &ptr)) {
		count(CTR_LOST_OTHER);
		return 0;
	}
	if (!ptr)
		return 0;
	send_event(KIND_FREE, 0, s->heap, ptr, 0, 0, 0, usdt_stack(ctx, KIND_FREE), 0, 0);
	return 0;
}

const struct usdt_site *unused_usdt_site __attribute__((unused));
