"""cpubench.py BEFORE AFTER ROUNDS: CPU seconds (user + system, setup
included) of the model's and top's totals' benchmarks run a fixed number of
times, the test binaries of two source trees in turn: steadier than wall
time on a machine others load. HEAPSCOPE_BENCH_TRACE feeds
BenchmarkModelTrace."""
import os, resource, statistics, subprocess, sys, tempfile

before, after, rounds = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2]), int(sys.argv[3])
tmp = tempfile.mkdtemp()

def pkg(src, kind):
    if kind == "agg":
        return os.path.join(src, "internal/totals") if os.path.isdir(os.path.join(src, "internal/totals")) else src
    return os.path.join(src, "analyze")

bins = {}
for side, src in (("before", before), ("after", after)):
    for kind in ("model", "agg"):
        d = pkg(src, kind)
        b = os.path.join(tmp, f"{kind}-{side}.test")
        subprocess.run(["go", "test", "-c", "-o", b, "."], cwd=d, check=True)
        bins[(kind, side)] = (b, d)

cases = [("model", "ModelChurn$", "60x"), ("model", "ModelMixed$", "60x"), ("model", "ModelTrace$", "20x"), ("agg", "AggregateChurn$", "3000x")]

def cpu(b, d, bench, n):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([b, "-test.run", "XXX", "-test.bench", bench, "-test.benchtime", n, "-test.count", "1"], cwd=d,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime

res = {}
for r in range(rounds):
    for kind, bench, n in cases:
        sides = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for side in sides:
            res.setdefault((bench, side), []).append(cpu(*bins[(kind, side)], bench, n))
for kind, bench, n in cases:
    b, a = res[(bench, "before")], res[(bench, "after")]
    print(f"{bench:18s} {n:6s} CPU s: before median {statistics.median(b):.3f} min {min(b):.3f} | after median "
          f"{statistics.median(a):.3f} min {min(a):.3f} | median ratio {statistics.median(a) / statistics.median(b):.3f}, "
          f"min ratio {min(a) / min(b):.3f}  (n={len(b)})")
    print("   before", " ".join(f"{x:.3f}" for x in b))
    print("   after ", " ".join(f"{x:.3f}" for x in a))
