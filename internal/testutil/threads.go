package testutil

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ThreadState is a thread's state letter (from /proc/PID/task/TID/stat: 't'
// in a tracing stop, 'T' stopped) and the PID of its tracer (TracerPid).
type ThreadState struct {
	TID    int
	State  byte
	Tracer int
}

// Stopped reports whether the thread is in a stop (t or T).
func (s ThreadState) Stopped() bool { return s.State == 't' || s.State == 'T' }

// Threads returns the state of each thread of pid that still exists.
func Threads(tb testing.TB, pid int) []ThreadState {
	tb.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var out []ThreadState
	for _, e := range ents {
		b, err := os.ReadFile(dir + e.Name() + "/stat")
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 || i+2 >= len(b) {
			continue // gone
		}
		st := ThreadState{State: b[i+2]}
		st.TID, _ = strconv.Atoi(e.Name())
		if s, err := os.ReadFile(dir + e.Name() + "/status"); err == nil {
			for _, l := range strings.Split(string(s), "\n") {
				if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
					st.Tracer, _ = strconv.Atoi(strings.TrimSpace(v))
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// StoppedThreads counts the threads of pid in a stop (t or T).
func StoppedThreads(tb testing.TB, pid int) int {
	tb.Helper()
	n := 0
	for _, s := range Threads(tb, pid) {
		if s.Stopped() {
			n++
		}
	}
	return n
}

// ThreadsProgram is a running workload scan_threads, whose threads count
// their iterations: it answers "p" with a line "counts N…".
type ThreadsProgram struct {
	TB       testing.TB
	In       io.Writer
	Out      *bufio.Reader
	NThreads int
}

// Line reads the program's next line; it fails the test on an error or on
// the program's report of a corrupt block or an interrupted call.
func (p *ThreadsProgram) Line() string {
	p.TB.Helper()
	l, err := p.Out.ReadString('\n')
	if err != nil {
		p.TB.Fatalf("reading scan_threads: %v (%q)", err, l)
	}
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "CORRUPT") || strings.HasPrefix(l, "EINTR") {
		p.TB.Fatalf("scan_threads: %s", l)
	}
	return l
}

// Counts asks the program for its threads' iteration counts.
func (p *ThreadsProgram) Counts() []int64 {
	p.TB.Helper()
	if _, err := io.WriteString(p.In, "p\n"); err != nil {
		p.TB.Fatal(err)
	}
	f := strings.Fields(p.Line())
	if len(f) != p.NThreads+1 || f[0] != "counts" {
		p.TB.Fatalf("bad counts line %q", f)
	}
	var c []int64
	for _, s := range f[1:] {
		n, _ := strconv.ParseInt(s, 10, 64)
		c = append(c, n)
	}
	return c
}

// Progressing waits (up to 30s) until every thread counted past before, and
// returns the counts.
func (p *ThreadsProgram) Progressing(before []int64) []int64 {
	p.TB.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		c := p.Counts()
		all := true
		for i := range c {
			all = all && c[i] > before[i]
		}
		if all {
			return c
		}
		if time.Now().After(deadline) {
			p.TB.Fatalf("the threads did not run on: counts %v, before %v", c, before)
		}
	}
}
