package ebpf

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

const libDir = "/usr/lib/x86_64-linux-gnu/"

// TestOtherAllocators traces ebpf_alloc using jemalloc (Debian's
// libjemalloc2: linked, and its static archive linked into the program),
// tcmalloc (libtcmalloc-minimal4: preloaded, and linked) and mimalloc
// (libmimalloc2.0, preloaded): every call is reported in order with its
// block, size and call site, from the allocator it went to (event.Heap),
// and the blocks left live are the program's leaks.
func TestOtherAllocators(t *testing.T) {
	for _, c := range []struct {
		name    string
		lib     string // must exist
		flags   []string
		preload bool
		heap    event.Heap
		static  bool
	}{
		{"jemalloc-linked", "libjemalloc.so.2", []string{"-Wl,--no-as-needed", "-ljemalloc"}, false, event.HeapJemalloc, false},
		{"jemalloc-static", "libjemalloc_pic.a", []string{"-Wl,--whole-archive", libDir + "libjemalloc_pic.a", "-Wl,--no-whole-archive", "-lstdc++"}, false, event.HeapJemalloc, true},
		{"tcmalloc-preloaded", "libtcmalloc_minimal.so.4", nil, true, event.HeapTcmalloc, false},
		{"tcmalloc-linked", "libtcmalloc_minimal.so.4", []string{"-Wl,--no-as-needed", "-l:libtcmalloc_minimal.so.4"}, false, event.HeapTcmalloc, false},
		{"mimalloc-preloaded", "libmimalloc.so.2", nil, true, event.HeapMimalloc, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(libDir + c.lib); err != nil {
				t.Fatalf("%v: install the Debian package (see .ci/run)", err)
			}
			bin := testutil.MustBuild(t, "ebpf_alloc", testutil.Options{Flags: c.flags})
			var env []string
			if c.preload {
				env = []string{"LD_PRELOAD=" + libDir + c.lib}
			}
			rec := newRecorder(t)
			tr := newTracer(t, Config{}, rec)
			w := startWorkloadEnv(t, env, bin, "20")
			if err := tr.Attach(w.pid()); err != nil {
				t.Fatal(err)
			}
			w.release(t)
			log := parseLog(t, w.lines(t, "done"))
			mustFlush(t, tr)

			allocator := bin
			if !c.static {
				tgs, err := findTargets(w.pid())
				if err != nil {
					t.Fatal(err)
				}
				allocator = ""
				for _, tg := range tgs {
					if tg.heap == c.heap {
						allocator = tg.open
					}
				}
				if allocator == "" {
					t.Fatalf("no %v target among %d", c.heap, len(tgs))
				}
			}
			checkCalls(t, rec, w.pid(), log, siteRanges(t, bin, log.sites), aliases(t, allocator), c.heap, event.DefaultStacks)

			want, got := liveOfLog(log), liveOfEvents(rec.eventsOf(w.pid()))
			if len(want) != 20 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("leaks %v, want %v", got, want)
			}
		})
	}
}

// liveOfLog replays a call log as the events it should make: the blocks
// left live, as "address size".
func liveOfLog(l callLog) []string {
	evs := make([]event.Event, len(l.calls))
	for i, c := range l.calls {
		evs[i] = event.Event{Kind: kindOf(c.fn), Addr: c.addr, Size: c.size, OldAddr: c.old}
	}
	return liveOfEvents(evs)
}

// liveOfEvents replays events: the blocks left live, as "address size".
func liveOfEvents(evs []event.Event) []string {
	live := map[uint64]uint64{}
	for _, e := range evs {
		switch e.Kind {
		case event.KindFree:
			delete(live, e.Addr)
		case event.KindRealloc:
			if e.Addr != 0 {
				delete(live, e.OldAddr)
				live[e.Addr] = e.Size
			}
		case event.KindAlloc:
			if e.Addr != 0 {
				live[e.Addr] = e.Size
			}
		}
	}
	return sortedLive(live)
}

func sortedLive(live map[uint64]uint64) []string {
	var out []string
	for a, s := range live {
		out = append(out, fmt.Sprintf("%#x %d", a, s))
	}
	sort.Strings(out)
	return out
}

// startWorkloadEnv is startWorkload with variables added to the
// environment.
func startWorkloadEnv(t testing.TB, env []string, bin string, args ...string) *workload {
	t.Helper()
	w := spawnWorkload(t, env, bin, args...)
	w.expect(t, "ready")
	return w
}
