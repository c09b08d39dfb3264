package census

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// python311 is Debian's python3.11, not the pyenv one first on PATH.
const python311 = "/usr/bin/python3.11"

// parseMallinfo parses a "m arena ordblks ... keepcost" line in hex.
func parseMallinfo(tb testing.TB, line string) Mallinfo {
	tb.Helper()
	f := strings.Fields(line)
	if len(f) != 11 || f[0] != "m" {
		tb.Fatalf("not a mallinfo line: %q", line)
	}
	v := make([]uint64, 10)
	for i := range v {
		var err error
		if v[i], err = strconv.ParseUint(f[1+i], 16, 64); err != nil {
			tb.Fatalf("not a mallinfo line: %q", line)
		}
	}
	return Mallinfo{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]}
}

// compareMallinfo checks the census's in-use and free totals against what
// the process's own mallinfo2 counted, within 0.1%.
func compareMallinfo(t *testing.T, c *Census, want Mallinfo) {
	t.Helper()
	got := c.Mallinfo()
	t.Logf("census:   %+v", got)
	t.Logf("mallinfo: %+v", want)
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"arena", got.Arena, want.Arena},
		{"uordblks (in use)", got.Uordblks, want.Uordblks},
		{"fordblks (free)", got.Fordblks, want.Fordblks},
		{"hblkhd (mmapped)", got.Hblkhd, want.Hblkhd},
		{"hblks", got.Hblks, want.Hblks},
	} {
		if absDiff(f.got, f.want)*1000 > f.want {
			t.Errorf("%s: census %d, mallinfo2 %d: more than 0.1%% apart", f.name, f.got, f.want)
		}
	}
	for _, p := range c.Problems {
		t.Errorf("problem: %v", p)
	}
	tot := c.Totals()
	t.Logf("%d arenas, %d chunks (%d in use, %d mmapped), took %v, paused %v in %d stops, read %d bytes in %d reads",
		len(c.Arenas), len(c.Chunks), tot.Chunks[InUse], tot.Chunks[Mmapped], c.Took, c.Paused, c.Stops, c.Bytes, c.Reads)
}

func TestPython(t *testing.T) {
	py := testutil.Tool(t, python311)
	// Strings past pymalloc's 512 bytes come from malloc; the rest from
	// pymalloc's arenas, which are mmapped memory the census must not
	// take for chunks.
	script := `
import ctypes, os
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MI
d = {}
for i in range(300000):
    d[i] = ("x" * (600 + i % 700)) if i % 3 == 0 else str(i) * (1 + i % 20)
for i in range(0, 300000, 7):
    del d[i]
names = MI._fields_
mi = libc.mallinfo2()
line = "m " + " ".join("%x" % getattr(mi, n) for n, _ in names) + "\nready\n"
os.write(1, line.encode())
os.read(0, 1)
`
	cmd := exec.Command(py, "-c", script)
	stdin, stdout := testutil.StartPiped(t, cmd)
	defer stdin.Close()
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	want := parseMallinfo(t, line)
	if l, _ := r.ReadString('\n'); l != "ready\n" {
		t.Fatalf("python said %q", l)
	}
	c := take(t, cmd.Process.Pid, TakeOptions{RSS: true})
	compareMallinfo(t, c, want)
	checkRSS(t, c)
	var strs int
	for i, ch := range c.Chunks {
		if name, text := c.Name(nil, i); ch.State == InUse && name == "string" && strings.Trim(text, "x") == "" {
			strs++
		}
	}
	// Each long str is a PyObject header then the text: not a string block.
	t.Logf("%d blocks of x's named as strings", strs)
}

// startMallinfo starts a real program with census_mallinfo preloaded, its
// standard input and error piped, and returns a function that asks it for
// mallinfo2 (SIGUSR1) and returns the line it writes.
func startMallinfo(t *testing.T, cmd *exec.Cmd) (stdin *os.File, ask func() Mallinfo) {
	t.Helper()
	lib := testutil.MustBuild(t, "census_mallinfo", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib)
	in, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = in
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.Close()
	errW.Close()
	t.Cleanup(func() {
		w.Close()
		cmd.Process.Kill()
		cmd.Wait()
		errR.Close()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(errR)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "m ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	return w, func() Mallinfo {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the program ended")
			}
			return parseMallinfo(t, l)
		case <-time.After(30 * time.Second):
			t.Fatal("no mallinfo line")
		}
		return Mallinfo{}
	}
}

// waitFor reads the program's standard output until a line that has s,
// for at most a minute.
func waitFor(t *testing.T, r *bufio.Reader, s string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				done <- err
				return
			}
			if strings.Contains(l, s) {
				done <- nil
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiting for %q: %v", s, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no line with %q in a minute", s)
	}
}

func TestSqlite(t *testing.T) {
	sq := testutil.Tool(t, "sqlite3")
	cmd := exec.Command(sq, ":memory:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, ask := startMallinfo(t, cmd)
	fmt.Fprint(in, `PRAGMA cache_size=-400000;
create table t(k integer primary key, v text);
insert into t select value, hex(randomblob(40 + value % 300)) from generate_series(1, 200000);
create index i on t(v);
delete from t where k % 5 = 0;
select count(*) from t;
.print ready
`)
	waitFor(t, bufio.NewReader(out), "ready")
	want := ask()
	c := take(t, cmd.Process.Pid, TakeOptions{RSS: true})
	compareMallinfo(t, c, want)
	checkRSS(t, c)
}

// TestGDB takes the census of a real C++ program: gdb, after it read
// libc's debug information (libc6-dbg), with its worker threads.
func TestGDB(t *testing.T) {
	gdb := testutil.Tool(t, "gdb")
	cmd := exec.Command(gdb, "-nx", "-q")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, ask := startMallinfo(t, cmd)
	fmt.Fprint(in, "set pagination off\nfile /lib/x86_64-linux-gnu/libc.so.6\ninfo functions ^malloc$\ninfo types ^malloc_state$\necho ready\\n\n")
	waitFor(t, bufio.NewReader(out), "ready")
	want := ask()
	c := take(t, cmd.Process.Pid, TakeOptions{RSS: true})
	compareMallinfo(t, c, want)
	checkRSS(t, c)
	var objects, strs uint64
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	n := NewNamer(cmd.Process.Pid, c.mapsForTest(), mem)
	for _, g := range c.Describe(n, nil) {
		if g.Name == "string" {
			strs += g.Blocks
		} else if g.Name != "" && !strings.HasPrefix(g.Name, "glibc:") {
			objects += g.Blocks
		}
	}
	for i, g := range c.Describe(n, nil) {
		if i < 12 || g.Name != "" && g.Name != "string" {
			t.Logf("%-14v %-40q %7d blocks %9d B %q", g.Class, g.Name, g.Blocks, g.Bytes, g.Text)
		}
	}
	if objects == 0 || strs == 0 {
		t.Errorf("gdb's heap has %d C++ objects named and %d strings: it has both", objects, strs)
	}
}

func TestNotGlibc(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	cases := []struct {
		name string
		cmd  func(t *testing.T) *exec.Cmd
		err  error
		says string
	}{
		{"redis (jemalloc)", func(t *testing.T) *exec.Cmd {
			// With no TCP port, redis needs a socket to listen on, or it exits.
			return exec.Command(testutil.Tool(t, "redis-server"), "--port", "0", "--unixsocket", t.TempDir()+"/redis.sock",
				"--save", "", "--appendonly", "no")
		}, errs.ErrNotSupported, "jemalloc"},
		{"tcmalloc", func(*testing.T) *exec.Cmd {
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
			return cmd
		}, errs.ErrNotSupported, "tcmalloc"},
		{"mimalloc", func(*testing.T) *exec.Cmd {
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2")
			return cmd
		}, errs.ErrNotSupported, "mimalloc"},
		{"static", func(t *testing.T) *exec.Cmd {
			return exec.Command(testutil.MustBuild(t, "census_churn", testutil.Options{Static: true}), "1")
		}, errs.ErrNoLayout, "statically linked"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd(t)
			if tc.name != "redis (jemalloc)" && tc.name != "static" {
				if _, err := os.Stat(strings.TrimPrefix(cmd.Env[len(cmd.Env)-1], "LD_PRELOAD=")); err != nil {
					testutil.SkipWithout(t, err)
				}
			}
			_, stdout := testutil.StartPiped(t, cmd)
			if tc.name == "redis (jemalloc)" {
				waitFor(t, bufio.NewReader(stdout), "ready to accept connections")
			} else {
				waitLoaded(t, cmd.Process.Pid, stdout)
			}
			_, err := TakeProcess(cmd.Process.Pid, ProcessOptions{})
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("census of %s: %v; want %v saying %q", tc.name, err, tc.err, tc.says)
			}
			t.Log(err)
		})
	}
}

// waitLoaded waits until the program has printed something: it runs main.
func waitLoaded(t *testing.T, pid int, stdout interface{ Read([]byte) (int, error) }) {
	t.Helper()
	got := make(chan bool, 1)
	go func() {
		b := make([]byte, 1)
		stdout.Read(b)
		got <- true
	}()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the program printed nothing")
	}
	if _, err := proc.ReadMaps(pid); err != nil {
		t.Fatal(err)
	}
}

func TestNoDebugFile(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	w := start(t, bin)
	_, err := TakeProcess(w.pid(), ProcessOptions{Options: Options{DebugDirs: []string{t.TempDir()}}})
	if !errors.Is(err, errs.ErrNoLayout) || !strings.Contains(err.Error(), "libc6-dbg") {
		t.Fatalf("census without a debug file: %v; want ErrNoLayout naming libc6-dbg", err)
	}
	t.Log(err)
}

// TestChurn takes 50 censuses of 8 threads allocating and freeing without
// pause: each census must find the heap whole (no problems), and the
// program must print what it prints when no census stops it.
func TestChurn(t *testing.T) {
	bin := testutil.MustBuild(t, "census_churn", testutil.Options{})
	const iterations = "3000000"
	run := func(censuses int) (string, []*Census) {
		cmd := exec.Command(bin, iterations)
		stdin, stdout := testutil.StartPiped(t, cmd)
		defer stdin.Close()
		r := bufio.NewReader(stdout)
		waitFor(t, r, "started")
		var cs []*Census
		for i := 0; i < censuses; i++ {
			c, err := TakeProcess(cmd.Process.Pid, ProcessOptions{})
			if err != nil {
				t.Fatalf("census %d: %v", i, err)
			}
			cs = append(cs, c)
			if st, err := proc.ReadStat(cmd.Process.Pid); err != nil || st.State == 't' || st.State == 'T' {
				t.Fatalf("after census %d the program is %q (%v)", i, st.State, err)
			}
		}
		var out strings.Builder
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the program's output: %v (so far %q)", err, out.String())
			}
			if l == "done\n" {
				break
			}
			out.WriteString(l)
		}
		return out.String(), cs
	}
	want, _ := run(0)
	got, cs := run(50)
	if got != want {
		t.Errorf("with 50 censuses the program printed\n%s\nwithout\n%s", got, want)
	}
	var stops int
	var maxPause time.Duration
	for i, c := range cs {
		for _, p := range c.Problems {
			t.Errorf("census %d (%d stops, busy %q): %v", i, c.Stops, c.Busy, p)
		}
		stops += c.Stops
		maxPause = max(maxPause, c.Paused)
		if testing.Verbose() {
			t.Logf("census %d: %d chunks, %d stops, took %v, paused %v, %d reads, %d bytes", i, len(c.Chunks), c.Stops, c.Took, c.Paused, c.Reads, c.Bytes)
		}
	}
	t.Logf("50 censuses: %d stops in all, longest pause %v; the last: %d chunks, %d arenas", stops, maxPause, len(cs[49].Chunks), len(cs[49].Arenas))
}

// killedEnv makes the test binary, run again by TestKilledMidCensus, take
// censuses of the pid it names until it is killed.
const killedEnv = "HEAPSCOPE_CENSUS_LOOP_PID"

func init() {
	if s := os.Getenv(killedEnv); s != "" {
		pid, _ := strconv.Atoi(s)
		fmt.Println("censusing")
		for {
			if _, err := TakeProcess(pid, ProcessOptions{}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
}

// TestKilledMidCensus kills a process that takes censuses of a program in
// a loop, at random moments: every thread of the program runs again.
func TestKilledMidCensus(t *testing.T) {
	bin := testutil.MustBuild(t, "census_bench", testutil.Options{})
	cmd := exec.Command(bin, "300000", "mixed", "4")
	stdin, stdout := testutil.StartPiped(t, cmd)
	defer stdin.Close()
	waitFor(t, bufio.NewReader(stdout), "ready")
	pid := cmd.Process.Pid
	for i := 0; i < 10; i++ {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		loop := exec.Command(self, "-test.run", "^$")
		loop.Env = append(os.Environ(), fmt.Sprintf("%s=%d", killedEnv, pid))
		_, out := testutil.StartPiped(t, loop)
		waitFor(t, bufio.NewReader(out), "censusing")
		time.Sleep(time.Duration(20+i*37) * time.Millisecond)
		loop.Process.Kill()
		loop.Wait()
		// The kernel lets the threads go when their tracer dies.
		deadline := time.Now().Add(10 * time.Second)
		for {
			stoppedThreads := testutil.StoppedThreads(t, pid)
			if stoppedThreads == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: %d threads of the program still stopped", i, stoppedThreads)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// And it is whole: one more census finds its heap.
	c, err := TakeProcess(pid, ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Problems) > 0 {
		t.Errorf("after the kills: %v", c.Problems)
	}
}
