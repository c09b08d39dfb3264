package ebpf

import (
	"debug/elf"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf/sites"
	"github.com/heapscope/heapscope/internal/testutil"
)

// call is one line of a workload's call log.
type call struct {
	site, fn     string
	addr, size   uint64
	old, oldSize uint64
}

// callLog is what ebpf_calls, ebpf_cxx and ebpf_mmap print after their
// calls: the address of each call site, and each call in order.
type callLog struct {
	sites map[string]uint64
	calls []call
}

func parseLog(t testing.TB, lines []string) callLog {
	t.Helper()
	l := callLog{sites: map[string]uint64{}}
	hex := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			t.Fatalf("bad number %q", s)
		}
		return v
	}
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "site":
			l.sites[f[1]] = hex(f[2])
		case len(f) >= 6 && f[0] == "call":
			c := call{site: f[1], fn: strings.ReplaceAll(f[2], "_", " "), addr: hex(f[3]), size: hex(f[4]), old: hex(f[5])}
			if !strings.HasPrefix(f[2], "operator") {
				c.fn = f[2]
			}
			if len(f) > 6 {
				c.oldSize = hex(f[6])
			}
			l.calls = append(l.calls, c)
		}
	}
	return l
}

// ranges maps the call-site functions (and main) of a workload to their
// addresses in the running process, from the binary's symbols and the
// addresses the workload printed.
type ranges map[string][2]uint64

func siteRanges(t testing.TB, bin string, printed map[string]uint64) ranges {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]elf.Symbol{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			byName[s.Name] = s
		}
	}
	var bias uint64
	for name, addr := range printed {
		s, ok := byName[name]
		if !ok {
			t.Fatalf("no symbol %s in %s", name, bin)
		}
		bias = addr - s.Value
	}
	r := ranges{}
	for name := range printed {
		s := byName[name]
		r[name] = [2]uint64{s.Value + bias, s.Value + bias + s.Size}
	}
	if m, ok := byName["main"]; ok {
		r["main"] = [2]uint64{m.Value + bias, m.Value + bias + m.Size}
	}
	return r
}

// in reports whether a return address lies in function name.
func (r ranges) in(name string, ret uint64) bool {
	fr, ok := r[name]
	return ok && ret > fr[0] && ret <= fr[1]
}

func kindOf(fn string) event.Kind {
	switch fn {
	case "realloc", "reallocarray", "mremap":
		return event.KindRealloc
	case "free", "operator delete", "operator delete[]":
		return event.KindFree
	case "mmap":
		return event.KindMmap
	case "munmap":
		return event.KindMunmap
	}
	return event.KindAlloc
}

// reportedFunc is the Func a call to fn is reported as: aliases (glibc's
// memalign is aligned_alloc) under one name, as sites.Find names them.
func reportedFunc(t testing.TB, fn string, aliased map[string]string) string {
	if a, ok := aliased[fn]; ok {
		return a
	}
	return fn
}

// aliases returns, for the allocator in file, the functions that share an
// address with another and the name they are reported under.
func aliases(t testing.TB, file string) map[string]string {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ss, err := sites.Find(f)
	if err != nil {
		t.Fatal(err)
	}
	found := map[event.Func]bool{}
	for _, s := range ss {
		found[s.Func] = true
	}
	a := map[string]string{}
	if !found[event.FuncMemalign] && found[event.FuncAlignedAlloc] {
		a["memalign"] = "aligned_alloc"
	}
	return a
}

// checkCalls compares the events of pid with the workload's log, one by
// one and in order: kind, function, block, size, old block, and that the
// stack's first frame is in the call-site function and its second in main.
func checkCalls(t *testing.T, rec *recorder, pid int, log callLog, r ranges, aliased map[string]string, heap event.Heap, stacks event.KindSet) {
	t.Helper()
	evs := rec.eventsOf(pid)
	if len(evs) != len(log.calls) {
		t.Errorf("%d events, %d calls made", len(evs), len(log.calls))
	}
	bad := 0
	for i := 0; i < len(evs) && i < len(log.calls); i++ {
		e, c := evs[i], log.calls[i]
		want := fmt.Sprintf("%v %s %#x %d %#x", kindOf(c.fn), reportedFunc(t, c.fn, aliased), c.addr, c.size, c.old)
		got := fmt.Sprintf("%v %v %#x %d %#x", e.Kind, e.Func, e.Addr, e.Size, e.OldAddr)
		problem := ""
		if got != want {
			problem = "got " + got
		} else if e.Heap != heap {
			problem = fmt.Sprintf("heap %v, want %v", e.Heap, heap)
		} else if stacks.Has(e.Kind) {
			fr := rec.frames(pid, e.Stack)
			switch {
			case e.Stack == 0:
				problem = "no stack"
			case !r.in(c.site, fr[0]):
				problem = fmt.Sprintf("first frame %#x not in %s %x", fr[0], c.site, r[c.site])
			case len(fr) < 2 || !r.in("main", fr[1]):
				problem = fmt.Sprintf("second frame not in main: %x", fr)
			}
		} else if e.Stack != 0 {
			problem = "a stack on a kind that takes none"
		}
		if problem != "" {
			bad++
			if bad <= 10 {
				t.Errorf("call %d (%s: %s): %s", i, c.site, want, problem)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d calls wrong in all", bad)
	}
}

var allStacks = event.KindsOf(event.KindAlloc, event.KindRealloc, event.KindFree, event.KindMmap, event.KindMunmap)

// TestCalls attaches to ebpf_calls, paused, releases it, and checks every
// call it made against its own log, in order: exact counts, sizes, blocks
// and call sites. free(NULL), which it calls every round, is not an event,
// while every other free is: the probe placed past free's NULL test
// misses none. Run with uprobe_multi links, with classic uprobes, and on a
// static binary (its own malloc).
func TestCalls(t *testing.T) {
	for _, c := range []struct {
		name    string
		opts    testutil.Options
		noMulti bool
	}{
		{"multi", testutil.Options{}, false},
		{"classic", testutil.Options{}, true},
		{"static", testutil.Options{Static: true}, false},
		{"no-frame-pointers", testutil.Options{NoFramePointers: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := testutil.MustBuild(t, "ebpf_calls", c.opts)
			rec := newRecorder(t)
			stacks := allStacks
			if c.opts.NoFramePointers {
				stacks = event.NoStacks // without frame pointers the stacks are one frame: not checked
			}
			tr := newTracer(t, Config{Stacks: stacks, noMulti: c.noMulti}, rec)
			w := traced(t, tr, bin, "20")
			log := parseLog(t, w.lines(t, "done"))
			mustFlush(t, tr)
			heap, allocator := event.HeapExe, bin
			if !c.opts.Static {
				heap, allocator = event.HeapLibc, libcPath(t, w.pid())
			}
			checkCalls(t, rec, w.pid(), log, siteRanges(t, bin, log.sites), aliases(t, allocator), heap, stacks)
			st := tr.Stats()
			if st.Delivered+st.TotalLost() != uint64(len(log.calls)) {
				t.Errorf("delivered %d + lost %d != %d calls", st.Delivered, st.TotalLost(), len(log.calls))
			}
			if st.StacksLost != 0 {
				t.Errorf("%d stacks lost", st.StacksLost)
			}
			rec.checkModules(t, w.pid())
		})
	}
}

// libcPath returns the C library pid maps.
func libcPath(t testing.TB, pid int) string {
	t.Helper()
	tgs, err := findTargets(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range tgs {
		if tg.heap == event.HeapLibc && strings.Contains(tg.path, "libc.so") {
			return tg.open
		}
	}
	t.Fatalf("pid %d maps no libc", pid)
	return ""
}
