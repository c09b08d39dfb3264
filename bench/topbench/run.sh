#!/bin/sh
# topbench: the CPU `heapscope top` adds to a session at its default interval
# (1s). The churn workload (testdata/workloads/churn.c: N malloc+free pairs)
# runs under `heapscope run` and under `heapscope top --` (plain mode, output
# to /dev/null), REPS times each, interleaved; GNU time gives the CPU seconds
# (user+sys) of heapscope and the program together. Usage (repo root):
# bench/topbench/run.sh [N REPS]
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
