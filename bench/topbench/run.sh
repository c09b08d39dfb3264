#!/bin/sh
# topbench: the CPU `heapscope top` adds to a session at its default interval
# (1s), on the churn workload (testdata/workloads/churn.c: N malloc+free
# pairs), REPS times, the variants interleaved in each rep:
#
#   run     heapscope run -- churn N 1: the session alone
#   join    the same session, with `heapscope top NAME` (plain mode, output
#           to /dev/null) joined to it from another process as soon as it
#           is registered: the session's CPU, and top's own
#   top     heapscope top -- churn N 1 (plain mode): top's own session
#
# GNU time gives the CPU seconds (user+sys) of each heapscope process,
# tracer and traced program together for `run` and `top --` (the program is
# their child). Usage (repo root): bench/topbench/run.sh [N REPS [N_EBPF]]
set -eu
N=${1:-20000000} REPS=${2:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/heapscope" ./cmd/heapscope
gcc -O2 -g -fno-omit-frame-pointer -pthread -o "$dir/churn" testdata/workloads/churn.c
hs=$dir/heapscope
t() { /usr/bin/time -f "%e %U %S" -o "$dir/t" "$@" >/dev/null 2>&1; cat "$dir/t"; }
for i in $(seq "$REPS"); do
	r=$(t "$hs" run -q -o "$dir/r.hst" -- "$dir/churn" "$N" 1)

	name=topbench-$$-$i
	/usr/bin/time -f "%e %U %S" -o "$dir/tj" "$hs" run -q --name "$name" -o "$dir/j.hst" -- "$dir/churn" "$N" 1 >/dev/null 2>&1 &
	rpid=$!
	until "$hs" query "$name" >/dev/null 2>&1; do sleep 0.02; done
	/usr/bin/time -f "%e %U %S" -o "$dir/tt" "$hs" top "$name" >/dev/null 2>&1 &
	tpid=$!
	wait "$rpid"
	wait "$tpid" || true
	j="$(cat "$dir/tj") $(cat "$dir/tt")"

	p=$(t "$hs" top -o "$dir/t.hst" -- "$dir/churn" "$N" 1)
	echo "$r | $j | $p" | awk -F'|' '{
		split($1, a, " "); split($2, b, " "); split($3, c, " ")
		r = a[2] + a[3]; js = b[2] + b[3]; jt = b[5] + b[6]; p = c[2] + c[3]
		printf "rep: run cpu %.2fs | joined: session cpu %.2fs (%+.1f%%), top cpu %.2fs (%+.1f%% of run), both %+.1f%% | top -- cpu %.2fs (%+.1f%%) | wall run %.2fs top %.2fs\n",
			r, js, 100*(js-r)/r, jt, 100*jt/r, 100*(js+jt-r)/r, p, 100*(p-r)/r, a[1], c[1] }'
done

# The same with eBPF in aggregate mode (the kernel keeps per-stack totals,
# the session reads snapshots of them at each flush): churn waits on its
# stdin until the tracer (`heapscope attach`, or `heapscope top -p`) has
# attached. Added CPU = (top's CPU - attach's CPU) / (attach's CPU + churn's
# own CPU).
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
		# (GNU time says first when the command failed: see RESULTS-top.md)
		echo "$(tail -1 "$dir/t") $(awk '/cpu_total_ns/ {print $2/1e9}' "$dir/churn.out")"
	}
	for i in $(seq "$REPS"); do
		a=$(e "$hs" attach -q --mode aggregate)
		p=$(e "$hs" top --mode aggregate)
		echo "$a $p" | awk '{a=$2+$3; p=$6+$7; printf "ebpf aggregate rep: attach cpu %.2fs, churn cpu %.2fs | top cpu %.2fs, churn cpu %.2fs | added cpu %+.1f%%\n", a, $4, p, $8, 100*(p-a)/(a+$4)}'
	done
fi
