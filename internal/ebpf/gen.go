package ebpf

// The BPF objects are committed so that building heapscope needs no clang.
// CI regenerates them and fails if they differ.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target amd64 -type event -type lib -type note -type uw_proc -type uw_range -type bucket -type live_val -type total_val -type usdt_site heapscope bpf/heapscope.bpf.c -- -I/usr/include/x86_64-linux-gnu -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target amd64 trap bpf/trap.bpf.c -- -I/usr/include/x86_64-linux-gnu -Wall -Werror
