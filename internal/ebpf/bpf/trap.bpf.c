// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Empty probes, to measure what a bare uprobe, uretprobe and uprobe session
// cost on this machine: the floor under heapscope's per-call overhead.

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("uprobe.multi")
int trap_enter(void *ctx)
{
	return 0;
}

SEC("uretprobe.multi")
int trap_exit(void *ctx)
{
	return 0;
}

SEC("uprobe.session")
int trap_session(void *ctx)
{
	return 0;
}
