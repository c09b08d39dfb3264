#!/bin/sh
# topbench: the CPU `heapscope top` adds to a session at its default interval
# (1s). The churn workload (testdata/workloads/churn.c: N malloc+free pairs)
# runs under `heapscope run` and under `heapscope top --` (plain mode, output
# to /dev/null), REPS times each, interleaved; GNU time gives the CPU seconds
# (user+sys) of heapscope and the program together. Usage (repo root):
# bench/topbench/run.sh [N REPS [N_EBPF]]
set -eu
N=${1:-20000000} REPS=${2:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/heapscope" ./cmd/heapscope
gcc -O2 -g -fno-omit-frame-pointer -pthread -o "$dir/churn" testdata/workloads/churn.c
t() { /usr/bin/time -f "%e %U %S" -o "$dir/t" "$@" >/dev/null 2>&1; cat "$dir/t"; }
for i in $(seq "$REPS"); do
	r=$(t "$dir/heapscope" run -q -o "$dir/r.hst" -- "$dir/churn" "$N" 1)
	p=$(t "$dir/heapscope" top -o "$dir/t.hst" -- "$dir/churn" "$N" 1)
	echo "$r $p $(stat -c %s "$dir/t.hst")" | awk '{r=$2+$3; p=$5+$6; printf "rep: run wall %.2fs cpu %.2fs | top wall %.2fs cpu %.2fs | added cpu %+.1f%% | trace %d bytes\n", $1, r, $4, p, 100*(p-r)/r, $7}'
done

# The same with eBPF in aggregate mode (the kernel keeps per-stack totals
# and top reads snapshots, not every event): churn waits on its stdin until
# the tracer (`heapscope attach`, or `heapscope top -p`) has attached. Added
# CPU = (top's CPU - attach's CPU) / (attach's CPU + churn's own CPU).
if [ "$(id -u)" = 0 ]; then
	NA=${3:-1000000}
	e() { # e CMD...: the tracer's wall/user/sys and churn's cpu_total_ns
		rm -f "$dir/fifo" "$dir/a.hst"
		mkfifo "$dir/fifo"
		"$dir/churn" "$NA" 1 wait < "$dir/fifo" > "$dir/churn.out" &
		cpid=$!
		exec 3> "$dir/fifo"
		/usr/bin/time -f "%e %U %S" -o "$dir/t" "$@" -p "$cpid" -o "$dir/a.hst" > /dev/null 2>&1 &
		tpid=$!
		sleep 2 # attached
		echo x >&3
		exec 3>&-
		wait "$cpid"
		wait "$tpid" || true
		echo "$(cat "$dir/t") $(awk '/cpu_total_ns/ {print $2/1e9}' "$dir/churn.out")"
	}
	for i in $(seq "$REPS"); do
		a=$(e "$dir/heapscope" attach -q --mode aggregate)
		p=$(e "$dir/heapscope" top --mode aggregate)
		echo "$a $p" | awk '{a=$2+$3; p=$6+$7; printf "ebpf aggregate rep: attach cpu %.2fs, churn cpu %.2fs | top cpu %.2fs, churn cpu %.2fs | added cpu %+.1f%%\n", a, $4, p, $8, 100*(p-a)/(a+$4)}'
	done
fi
