#!/bin/bash
# record.sh HEAPSCOPE DIR: the traces bench/samebytes/run.sh compares
# outputs of, recorded with the preload provider: sqlite3 and python3 as
# bench/programs runs them (sqlite3 twice, -a and -b, for the diffs; once
# sampled), and testdata/workloads/inline_sites.c built -O2 -g (stacks
# with inlined frames; two sites that differ only in the inlining), twice
# with different counts.
set -euo pipefail
hs=$(realpath "$1")
mkdir -p "$2"
cd "$2"
src=$(dirname "$(realpath "$0")")/../../testdata/workloads/inline_sites.c
sql="create table t(a integer, b text); insert into t select value, hex(randomblob(16)) from generate_series(1,200000); create index ti on t(b); select count(*), sum(length(b)) from t group by a % 7 limit 2;"
py=$'import json\ndata=[]\nfor i in range(300000):\n    d={\'k\':i,\'s\':str(i)*3,\'l\':[i,i+1,i+2]}\n    data.append(d)\n    if len(data)>1000: data.pop(0)\nprint(len(json.dumps(data)))\n'
gcc -O2 -g -fno-omit-frame-pointer -o inline_sites "$src"
"$hs" run -q -o sqlite-a.hst -- sqlite3 :memory: "$sql" >/dev/null
"$hs" run -q -o sqlite-b.hst -- sqlite3 :memory: "$sql" >/dev/null
"$hs" run -q --sample 64KiB -o sqlite-sampled.hst -- sqlite3 :memory: "$sql" >/dev/null
PYTHONMALLOC=malloc "$hs" run -q -o python.hst -- /usr/bin/python3.11 -c "$py" >/dev/null
"$hs" run -q -o inline-a.hst -- ./inline_sites 1000
"$hs" run -q -o inline-b.hst -- ./inline_sites 3000
