#!/bin/sh
# run.sh BIN DIR: what BIN needs (wall, CPU, max RSS) to report and export the
# hostile inputs that `go run ./bench/hostile -o DIR` writes (issue 27 item 9).
# Run it for two builds to compare them; see bench/RESULTS-hostile.md.
set -u
bin=$1
dir=$2
t() {
	printf '%-44s ' "$*"
	timeout 600 /usr/bin/time -f '%e s wall, %U s user, %S s sys, %M KB max RSS' "$bin" "$@" 2>&1 >/dev/null | tail -1
}
t report "$dir/procs.hst"
t report "$dir/stacks.hst"
t export --format pprof -o "$dir/out.pb.gz" "$dir/stacks.hst"
t export --format collapsed -o "$dir/out.txt" "$dir/stacks.hst"
t report "$dir/dwarf.hst"
