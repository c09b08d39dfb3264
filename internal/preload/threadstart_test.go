//go:build linux && amd64

package preload

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// The unwinders a thread's setup must work under: each walks the stack
// within the bounds the setup found.
var threadStartUnwinders = []event.Unwind{event.UnwindTables, event.UnwindFP, event.UnwindDWARF}

// traceBounded is trace with a deadline: a program that hangs under the
// interposer is killed (with its process group) and fails the test instead
// of the test binary's timeout.
func traceBounded(t *testing.T, cfg Config, limit time.Duration, bin string, args ...string) (r *result, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var errs strings.Builder
	cmd.Stderr = &errs
	r = traceCmd(t, cfg, cmd)
	if ctx.Err() != nil {
		t.Fatalf("%s %s hangs under the interposer (unwind %v): killed after %v", bin, strings.Join(args, " "), cfg.Unwind, limit)
	}
	if !r.state.Success() {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), r.state, errs.String())
	}
	return r, errs.String()
}

// threadsOf is the set of threads of pid that made an event.
func (r *result) threadsOf(pid int) map[uint32]bool {
	tids := map[uint32]bool{}
	for _, e := range r.of(pid) {
		tids[e.TID] = true
	}
	return tids
}

// TestThreadStartInsideLibc runs threads whose first heap call is glibc's
// realloc inside pthread_getattr_np, made while it holds the thread's lock
// (as HotSpot's and ripgrep's threads do), half of them on stacks of their
// own with a guard zone (as HotSpot's). The thread's setup used to call
// pthread_getattr_np itself from that realloc and wait for that lock for
// ever. Every thread must finish, its calls be recorded, the realloc inside
// pthread_getattr_np among them, and its stacks be whole under every
// unwinder.
func TestThreadStartInsideLibc(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_getattr", testutil.Options{})
	const waves, per, k = 6, 4, 50
	for _, u := range threadStartUnwinders {
		t.Run(u.String(), func(t *testing.T) {
			r, _ := traceBounded(t, Config{Unwind: u}, 60*time.Second, bin, fmt.Sprint(waves), fmt.Sprint(per), fmt.Sprint(k))
			if want := fmt.Sprintf("threads %d\n", waves*per); r.stdout != want {
				t.Fatalf("output %q, want %q", r.stdout, want)
			}
			site := map[uint32]int{}
			getattr := map[uint32]int{}
			for _, e := range r.of(r.pid) {
				switch {
				case e.Func == event.FuncMalloc && e.Size == 24 && r.site(e) == "site_getattr":
					site[e.TID]++
					if c := r.chain(e); len(c) < 4 || !slices.Equal(c[:4], []string{"site_getattr", "chain_b", "chain_a", "worker"}) {
						t.Errorf("thread %d: stack %v, want site_getattr chain_b chain_a worker ...", e.TID, c)
					}
				case e.Func == event.FuncRealloc && slices.Contains(r.chain(e), "pthread_getattr_np"):
					getattr[e.TID]++
				}
			}
			if len(site) != waves*per {
				t.Errorf("site_getattr called from %d threads, want %d", len(site), waves*per)
			}
			for tid, n := range site {
				if n != k {
					t.Errorf("thread %d: %d calls of site_getattr, want %d", tid, n, k)
				}
				if getattr[tid] == 0 {
					t.Errorf("thread %d: no realloc inside pthread_getattr_np recorded", tid)
				}
			}
		})
	}
}

// sortedLines is s's lines in order, for output whose line order depends
// on threads.
func sortedLines(s string) []string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	slices.Sort(l)
	return l
}

// TestRipgrepThreads runs Debian's ripgrep with 2 and 4 worker threads
// under every unwinder (its threads call pthread_getattr_np at their
// start; `heapscope run rg -j2` hung there): it finishes with the output it
// has untraced, and its threads' calls are recorded.
func TestRipgrepThreads(t *testing.T) {
	rg := testutil.Tool(t, "rg")
	const dir = "/usr/include"
	if _, err := os.Stat(dir); err != nil {
		testutil.SkipWithout(t, err)
	}
	for _, j := range []string{"-j2", "-j4"} {
		args := []string{j, "-c", "static", dir}
		want, err := exec.Command(rg, args...).Output()
		if err != nil {
			t.Fatalf("rg untraced: %v", err)
		}
		for _, u := range threadStartUnwinders {
			t.Run(j+"/"+u.String(), func(t *testing.T) {
				r, _ := traceBounded(t, Config{Unwind: u}, 60*time.Second, rg, args...)
				if got := sortedLines(r.stdout); !slices.Equal(got, sortedLines(string(want))) {
					t.Errorf("traced output differs: %d lines, untraced %d", len(got), len(sortedLines(string(want))))
				}
				if n := len(r.threadsOf(r.pid)); n < 2 {
					t.Errorf("events from %d threads, want the workers' too", n)
				}
			})
		}
	}
}

// TestJavaThreads runs the JVM under every unwinder: `java -version`, and a
// program whose threads allocate on the C heap (java.util.zip) and the Java
// heap. HotSpot calls pthread_getattr_np at each thread's entry; the JVM
// hung there. Each run must end with the output it has untraced.
func TestJavaThreads(t *testing.T) {
	java := testutil.Tool(t, "java")
	javac := testutil.Tool(t, "javac")
	src, err := testutil.Source("preload_jthreads", testutil.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src = strings.TrimSuffix(src, ".c") + ".java"
	classes := t.TempDir()
	if out, err := exec.Command(javac, "-d", classes, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	runs := []struct {
		name string
		args []string
	}{{"version", []string{"-version"}}, {"Jthreads", []string{"-cp", classes, "Jthreads", "8", "100"}}}
	for _, run := range runs {
		args := run.args
		var wantErr strings.Builder
		cmd := exec.Command(java, args...)
		cmd.Stderr = &wantErr
		want, err := cmd.Output()
		if err != nil {
			t.Fatalf("java %v untraced: %v\n%s", args, err, want)
		}
		for _, u := range threadStartUnwinders {
			t.Run(run.name+"/"+u.String(), func(t *testing.T) {
				r, stderr := traceBounded(t, Config{Unwind: u}, 120*time.Second, java, args...)
				if r.stdout != string(want) || stderr != wantErr.String() {
					t.Errorf("traced output %q and %q, untraced %q and %q", r.stdout, stderr, want, wantErr.String())
				}
				if n := len(r.threadsOf(r.pid)); n < 2 {
					t.Errorf("events from %d threads, want the JVM's threads' too", n)
				}
			})
		}
	}
}

// TestAllocInsideLoaderLock runs a thread that allocates inside its own
// dl_iterate_phdr callback (the loader's lock held, as Rust's backtrace
// does) while another thread loads and unloads a library and allocates, so
// that the interposer lists the loaded objects again and again. It used to
// list them holding its stack table's lock (and libunwind to walk holding
// its own), which the first thread waited for while holding the loader's
// lock: a deadlock. Every call must be recorded.
func TestAllocInsideLoaderLock(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_phdr", testutil.Options{Flags: []string{"-ldl"}})
	const rounds = 4000
	for _, u := range threadStartUnwinders {
		t.Run(u.String(), func(t *testing.T) {
			r, _ := traceBounded(t, Config{Unwind: u}, 60*time.Second, bin, fmt.Sprint(rounds))
			var callbacks int
			if _, err := fmt.Sscanf(r.stdout, "callbacks %d", &callbacks); err != nil || callbacks < rounds {
				t.Fatalf("output %q", r.stdout)
			}
			var inside, loader int
			for _, e := range r.of(r.pid) {
				switch {
				case e.Func == event.FuncMalloc && e.Size == 48:
					if inside++; inside%100 == 0 && !slices.Contains(r.chain(e), "cb") {
						t.Errorf("a call inside the callback has stack %v, without cb", r.chain(e))
					}
				case e.Func == event.FuncMalloc && e.Size == 56 && r.site(e) == "site_loader":
					loader++
				}
			}
			if inside != callbacks || loader != rounds {
				t.Errorf("%d calls inside the callback recorded of %d, %d of the loader's thread of %d", inside, callbacks, loader, rounds)
			}
		})
	}
}
