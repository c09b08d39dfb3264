#!/bin/sh
# diffbench: does `heapscope diff A B` take no longer than `heapscope report A`
# plus `heapscope report B`? Two python3 traces (the reportbench script, run
# with N1 and N2 iterations, PYTHONMALLOC=malloc, DWARF unwinding), then each
# command REPS times, interleaved, output to /dev/null; wall and CPU seconds
# from GNU time. Usage: bench/diffbench/run.sh [N1 N2 REPS] (from the repo root).
set -eu
N1=${1:-120000} N2=${2:-150000} REPS=${3:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/heapscope" ./cmd/heapscope
script='
import json, sys
keep = []
for i in range(int(sys.argv[1])):
    d = {"k%d" % j: [j, str(j) * 3, (j, i)] for j in range(4)}
    s = json.dumps(d)
    if i % 100 == 0:
        keep.append(s)
    if len(keep) > 500:
        keep = keep[250:]
'
PYTHONMALLOC=malloc "$dir/heapscope" run -q --unwind dwarf -o "$dir/a.hst" -- /usr/bin/python3.11 -c "$script" "$N1"
PYTHONMALLOC=malloc "$dir/heapscope" run -q --unwind dwarf -o "$dir/b.hst" -- /usr/bin/python3.11 -c "$script" "$N2"
echo "traces: $(stat -c %s "$dir/a.hst") and $(stat -c %s "$dir/b.hst") bytes"
t() { /usr/bin/time -f "%e %U %S" -o "$dir/t" "$@" >/dev/null 2>&1; cat "$dir/t"; }
for i in $(seq "$REPS"); do
	ra=$(t "$dir/heapscope" report "$dir/a.hst")
	rb=$(t "$dir/heapscope" report "$dir/b.hst")
	d=$(t "$dir/heapscope" diff "$dir/a.hst" "$dir/b.hst")
	echo "$ra $rb $d" | awk '{printf "rep: two reports wall %.2fs cpu %.2fs | diff wall %.2fs cpu %.2fs\n", $1+$4, $2+$3+$5+$6, $7, $8+$9}'
done
