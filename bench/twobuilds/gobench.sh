#!/bin/bash
# gobench.sh BEFORE AFTER OUT [ROUNDS]: the model, top's totals, decode and
# index benchmarks of two source trees (e.g. `git archive` copies of two
# commits), their test binaries run in turn, ROUNDS times (default 6), the
# first in odd rounds and the second in even ones, into OUT/KIND-{before,after}.txt
# for benchstat. HEAPSCOPE_BENCH_TRACE (a trace, e.g. bench/samebytes'
# python.hst) feeds BenchmarkModelTrace and query's BenchmarkBuild. top's
# totals were in the root package before round 5, in internal/totals since:
# the tree that has internal/totals is benchmarked there.
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); out=$3; rounds=${4:-6}
mkdir -p "$out"; out=$(realpath "$out")
aggdir() { if [ -d "$1/internal/totals" ]; then echo "$1/internal/totals"; else echo "$1"; fi; }
declare -A dir bench
for side in before after; do
	src=$before; [ $side = after ] && src=$after
	dir[model-$side]=$src/analyze dir[agg-$side]=$(aggdir "$src") dir[replay-$side]=$src/tracefile dir[query-$side]=$src/query
	for k in model agg replay query; do (cd "${dir[$k-$side]}" && go test -c -o "$out/$k-$side.test" .); done
done
bench[model]=Model bench[agg]=Aggregate bench[replay]=Replay bench[query]='Build$'
run() { (cd "${dir[$1]}" && "$out/$1.test" -test.run XXX -test.bench "${bench[${1%-*}]}" -test.count 1 2>&1 |
	grep -E '^(Benchmark|goos|goarch|pkg|cpu)' | sed 's#^pkg: github.com/heapscope/heapscope/internal/totals#pkg: github.com/heapscope/heapscope#') >>"$out/$1.txt"; }
rm -f "$out"/*.txt
for i in $(seq "$rounds"); do
	for k in model agg replay query; do
		if [ $((i % 2)) = 1 ]; then run $k-before; run $k-after; else run $k-after; run $k-before; fi
	done
done
for k in model agg replay query; do benchstat "$out/$k-before.txt" "$out/$k-after.txt"; done
