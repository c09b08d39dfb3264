// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): children: fork and exec.

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
	mark_held(pid);
	n->held = stop_failed(pid, bpf_send_signal_task(task, SIGSTOP_, PIDTYPE_TGID, 0));
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
