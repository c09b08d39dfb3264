// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): the dynamic loader.

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

// Every process stopped here (by the loader's probe or at a fork or exec)
// until user space continues it: the tracer's watchdog process
// (watchdog.go), which holds this map too, continues what it lists when
// the tracer dies without doing so.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 16384);
} held SEC(".maps");

// mark_held records tgid in held before its stop; stop_failed forgets it
// when the stop failed (err, what the signal helper returned).
static __always_inline void mark_held(__u32 tgid)
{
	__u8 one = 1;
	bpf_map_update_elem(&held, &tgid, &one, BPF_ANY);
}

static __always_inline long stop_failed(__u32 tgid, long err)
{
	if (err)
		bpf_map_delete_elem(&held, &tgid);
	return err;
}

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
	mark_held(tgid);
	nt->held = stop_failed(tgid, bpf_send_signal(19 /* SIGSTOP */));
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
int dl_state_multi(struct pt_regs *ctx)
{
	return do_dl_state(ctx);
}

SEC("uprobe")
int dl_state(struct pt_regs *ctx)
{
	return do_dl_state(ctx);
}
