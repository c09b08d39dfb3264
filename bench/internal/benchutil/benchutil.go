// Package benchutil holds what heapscope's benchmark programs share: the
// description of the machine they ran on and the median of repetitions.
package benchutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
)

// Machine describes the host: CPU, cores, kernel, libc, Go, heaptrack.
func Machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.Index(l, ":"); i >= 0 {
					cpu = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	kernel := strings.TrimSpace(cmdOut("uname", "-r"))
	libc := firstLine(cmdOut("ldd", "--version"))
	ht := firstLine(cmdOut("heaptrack", "--version"))
	return fmt.Sprintf("%s, %d CPUs, kernel %s, %s, %s, %s", cpu, runtime.NumCPU(), kernel, libc, runtime.Version(), ht)
}

// Program is a real workload the benchmarks trace.
type Program struct {
	Name string
	Argv []string
	Env  []string // added to the environment
}

// Programs are the real programs of bench/programs and bench/topbench.
var Programs = []Program{
	{"sqlite3", []string{"sqlite3", ":memory:",
		"create table t(a integer, b text); insert into t select value, hex(randomblob(16)) from generate_series(1,200000); " +
			"create index ti on t(b); select count(*), sum(length(b)) from t group by a % 7 limit 2;"}, nil},
	// The interpreter's real binary, not a shell shim; PYTHONMALLOC=malloc
	// sends every object through the C allocator, as heaptrack's users do.
	{"python3", []string{"/usr/bin/python3.11", "-c",
		"import json\ndata=[]\nfor i in range(300000):\n    d={'k':i,'s':str(i)*3,'l':[i,i+1,i+2]}\n" +
			"    data.append(d)\n    if len(data)>1000: data.pop(0)\nprint(len(json.dumps(data)))\n"},
		[]string{"PYTHONMALLOC=malloc"}},
}

// Median returns the median of xs, or 0 when xs is empty.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// CPUSeconds returns the CPU seconds (user and system) of this process
// and of its waited-for children.
func CPUSeconds() (self, children float64) {
	sec := func(who int) float64 {
		var ru syscall.Rusage
		syscall.Getrusage(who, &ru)
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return sec(syscall.RUSAGE_SELF), sec(syscall.RUSAGE_CHILDREN)
}

// RemoveGlob removes the files matching pattern, ignoring errors: it clears
// the traces a repetition left behind.
func RemoveGlob(pattern string) {
	matches, _ := filepath.Glob(pattern)
	for _, m := range matches {
		os.Remove(m)
	}
}

func cmdOut(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
