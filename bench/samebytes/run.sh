#!/bin/bash
# samebytes: every output of the analysis side for a set of traces, one file
# per output, so that two builds can be compared byte for byte:
#
#   bench/samebytes/run.sh HEAPSCOPE TRACES OUT
#
# HEAPSCOPE is a built binary, TRACES a folder of .hst files, OUT a new
# folder. For each trace: report (text, json, html), info, export (pprof,
# collapsed by every metric), and serve's API (summary, timeline, window,
# flame by every cost both ways, functions, callers, sites, histogram,
# export) over the whole trace and over its middle half. For each pair
# NAME-a.hst / NAME-b.hst: diff (text, json), report --base, export --base
# and serve --base's /api/diff. Then compare two OUT folders with
#
#   diff -r OUT1 OUT2 && echo identical
#
# serve builds its index in a fresh cache folder (XDG_CACHE_HOME), so a
# cached index of another build is never read.
set -euo pipefail
hs=$(realpath "$1")
traces=$(realpath "$2")
out=$3
mkdir "$out"
out=$(realpath "$out")
cache=$(mktemp -d)
trap 'rm -rf "$cache"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true' EXIT

metrics="alloc_space alloc_objects inuse_space inuse_objects temporary peak_space"
costs="leaks peak net bytes calls temporary aifi aifo aofi aofo"

# serve_api NAME FILE [BASE]: serve's answers, one file each.
serve_api() {
	local name=$1 file=$2 base=${3:-}
	local args=(serve --listen 127.0.0.1:0 "$file")
	[ -n "$base" ] && args+=(--base "$base")
	XDG_CACHE_HOME=$cache "$hs" "${args[@]}" >"$cache/url" 2>/dev/null &
	pid=$!
	local url=""
	for _ in $(seq 1200); do
		url=$(grep -o 'http://[^ ]*' "$cache/url" | head -1 || true)
		[ -n "$url" ] && break
		sleep 0.05
	done
	url=${url%/}
	get() { curl -sS --fail-with-body "$url/api/$1" >"$out/$name.api.$2" || echo "(status $?)" >>"$out/$name.api.$2"; }
	get "index?wait=1" index
	# The middle half of the trace, from its first and last heap events.
	get summary summary
	read -r from to < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s,e=d["start_ns"],d["end_ns"]; print(s+(e-s)//4, s+3*(e-s)//4)' "$out/$name.api.summary")
	local w="from_ns=$from&to_ns=$to"
	get "timeline" timeline
	get "timeline?$w&points=50" timeline-w
	get "window" window
	get "window?$w" window-w
	for c in $costs; do
		get "flame?cost=$c" "flame-$c"
		get "flame?cost=$c&invert=1&$w" "flame-inv-$c-w"
		get "functions?cost=$c" "functions-$c"
		get "sites?$w&cost=$c" "sites-$c-w"
	done
	get "flame?cost=instant&at_ns=$to" flame-instant
	fn=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["functions"][0]["name"] if d.get("functions") else "")' "$out/$name.api.functions-bytes")
	get "callers?function=$(python3 -c 'import urllib.parse,sys; print(urllib.parse.quote(sys.argv[1]))' "$fn")&cost=bytes" callers
	get "sites" sites
	get "sites?top=0" sites-all
	get "histogram" histogram
	get "histogram?$w" histogram-w
	get "export?format=pprof" export-pprof
	get "export?format=collapsed" export-collapsed
	get "export?format=json" export-json
	get "export?format=pprof&$w" export-pprof-w
	if [ -n "$base" ]; then
		for c in leaks bytes calls temporary; do get "diff?cost=$c" "diff-$c"; done
		get "diff?cost=bytes&$w" diff-bytes-w
	fi
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
}

for t in "$traces"/*.hst; do
	n=$(basename "$t" .hst)
	"$hs" report "$t" >"$out/$n.report.txt"
	"$hs" report --format json "$t" >"$out/$n.report.json"
	"$hs" report --format json --top 0 "$t" >"$out/$n.report-all.json"
	"$hs" report --format html -o "$out/$n.report.html" "$t"
	"$hs" info "$t" >"$out/$n.info.txt"
	"$hs" export --format pprof -o "$out/$n.pb.gz" "$t"
	for m in $metrics; do
		"$hs" export --format collapsed --metric "$m" -o "$out/$n.$m.collapsed" "$t" 2>"$out/$n.$m.collapsed.err" || true
	done
	serve_api "$n" "$t"
done
for a in "$traces"/*-a.hst; do
	b=${a%-a.hst}-b.hst
	[ -f "$b" ] || continue
	n=$(basename "$a" -a.hst)
	"$hs" diff "$a" "$b" >"$out/$n.diff.txt"
	"$hs" diff --format json "$a" "$b" >"$out/$n.diff.json"
	"$hs" report --base "$a" "$b" >"$out/$n.report-base.txt"
	"$hs" export --format pprof --base "$a" -o "$out/$n.diff.pb.gz" "$b"
	serve_api "$n.base" "$b" "$a"
done
