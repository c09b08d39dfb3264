package ebpf

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/usdt"
	"github.com/heapscope/heapscope/symbolize"
)

// samplerSite is one call site of usdt_sampler, as it prints it.
type samplerSite struct {
	allocs, bytes, liveObjects, liveBytes    uint64
	samples, weight, liveSamples, liveWeight uint64
}

// samplerOutput parses usdt_sampler's report: its sites, what its sampler
// fired, and its semaphores' values.
func samplerOutput(t *testing.T, lines []string) (sites map[string]samplerSite, allocs, frees, semA, semF uint64) {
	t.Helper()
	sites = map[string]samplerSite{}
	for _, l := range lines {
		f := strings.Fields(l)
		num := func(i int) uint64 {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			return n
		}
		switch {
		case len(f) == 18 && f[0] == "site":
			sites[f[1]] = samplerSite{num(3), num(5), num(7), num(9), num(11), num(13), num(15), num(17)}
		case len(f) == 6 && f[0] == "sampler":
			allocs, frees = num(2), num(4)
		case len(f) == 3 && f[0] == "semaphores":
			semA, semF = num(1), num(2)
		}
	}
	if len(sites) != 4 {
		t.Fatalf("usdt_sampler said %q", lines)
	}
	return sites, allocs, frees, semA, semF
}

// samplerLines reads usdt_sampler's report, to its semaphores' line
// (after which it waits).
func samplerLines(t *testing.T, w *workload) []string {
	t.Helper()
	var lines []string
	for w.out.Scan() {
		lines = append(lines, w.out.Text())
		if strings.HasPrefix(w.out.Text(), "semaphores") {
			return lines
		}
	}
	t.Fatalf("usdt_sampler ended before its semaphores: %v", w.out.Err())
	return nil
}

// siteOf names the usdt_sampler site a stack is of: the first of its
// frames (inlined ones included) in one of the sites' functions.
func siteOf(sym *symbolize.Symbolizer, pid uint32, frames []uint64, sites map[string]samplerSite) string {
	for _, a := range frames {
		for _, f := range sym.Frames(pid, a) {
			if _, ok := sites[f.Function]; ok {
				return f.Function
			}
		}
	}
	return ""
}

// TestUSDTSource traces usdt_sampler, which implements OpenTelemetry's
// otel_memory contract, through its probes (SourceUSDT): the kernel raises
// their semaphores, which turns the program's sampler on; every probe it
// fires is an event (as many allocations and frees as it says it fired),
// with the probe's weight, and with a stack that names the call site: per
// site, the weights of the allocations add up to what the sampler says it
// weighed, exactly, and those of the blocks still live to its live weight,
// in the events and in the heap model's estimates (analyze) alike. Nothing
// else is probed: the malloc calls the sampler did not sample are not
// seen.
func TestUSDTSource(t *testing.T) {
	for _, o := range []testutil.Options{{}, {NoFramePointers: true, Flags: []string{"-fPIE", "-pie"}}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			bin := testutil.MustBuild(t, "usdt_sampler", o)
			rec := newRecorder(t)
			tr := newTracer(t, Config{Source: SourceUSDT, UnwindTables: true}, rec)
			const rate = 65536
			w := startWorkload(t, bin, strconv.Itoa(rate), "3", "wait")
			if err := tr.Attach(w.pid()); err != nil {
				t.Fatal(err)
			}
			w.release(t)
			lines := samplerLines(t, w)
			sites, fired, firedFrees, semA, semF := samplerOutput(t, lines)
			if semA == 0 || semF == 0 {
				t.Errorf("semaphores %d %d while attached, want both raised", semA, semF)
			}
			mustFlush(t, tr)
			evs := rec.eventsOf(w.pid())

			sym := symbolize.New(symbolize.Options{})
			defer sym.Close()
			for _, m := range rec.modules {
				sym.AddModule(m)
			}
			weights, live := map[string]uint64{}, map[string]uint64{}
			byAddr := map[uint64]event.Event{}
			var allocs, frees uint64
			m := analyze.New(analyze.Options{SampleRate: rate})
			m.Process(event.Process{PID: uint32(w.pid())})
			ids := map[event.StackID]bool{}
			for _, e := range evs {
				if e.Stack != 0 && !ids[e.Stack] {
					ids[e.Stack] = true
					m.Stack(event.Stack{PID: e.PID, ID: e.Stack, Frames: rec.frames(w.pid(), e.Stack)})
				}
				switch e.Kind {
				case event.KindAlloc:
					allocs++
					site := siteOf(sym, e.PID, rec.frames(w.pid(), e.Stack), sites)
					if site == "" {
						t.Errorf("allocation of %d bytes at %#x: no site in its stack", e.Size, e.Addr)
					}
					weights[site] += e.OldSize
					byAddr[e.Addr] = e
				case event.KindFree:
					frees++
					delete(byAddr, e.Addr)
				default:
					t.Errorf("event %+v", e)
				}
			}
			m.Events(evs)
			for _, e := range byAddr {
				live[siteOf(sym, e.PID, rec.frames(w.pid(), e.Stack), sites)] += e.OldSize
			}
			if allocs != fired || frees != firedFrees || fired == 0 {
				t.Errorf("the sampler fired %d allocs and %d frees; the tracer saw %d and %d", fired, firedFrees, allocs, frees)
			}
			model := map[string][2]uint64{}
			for _, st := range m.Profile().Stacks {
				site := siteOf(sym, uint32(w.pid()), st.Frames, sites)
				model[site] = [2]uint64{model[site][0] + st.Bytes, model[site][1] + st.LiveBytes}
			}
			for name, s := range sites {
				if weights[name] != s.weight || live[name] != s.liveWeight || model[name] != [2]uint64{s.weight, s.liveWeight} {
					t.Errorf("%s: weights %d, live %d, model %v; the sampler weighed %d, live %d",
						name, weights[name], live[name], model[name], s.weight, s.liveWeight)
				}
			}
			t.Logf("%d allocations and %d frees fired; weights by site %v, live %v", fired, firedFrees, weights, live)
			w.release(t)
			w.wait(t)
		})
	}
}

// TestUSDTAuto: SourceAuto traces a process through its probes when it has
// them and through its allocator's functions otherwise; SourceUSDT refuses
// a process without them, with ErrUnavailable.
func TestUSDTAuto(t *testing.T) {
	sampler := testutil.MustBuild(t, "usdt_sampler", testutil.Options{})
	plain := testutil.MustBuild(t, "ebpf_alloc", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Source: SourceAuto}, rec)
	ws := startWorkload(t, sampler, "4096", "1", "wait")
	wp := startWorkload(t, plain, "3")
	attachAll(t, tr, ws, wp)
	ws.release(t)
	ws.expect(t, "semaphores")
	wp.release(t)
	wp.expect(t, "done")
	mustFlush(t, tr)
	var weighed, plainEvents int
	for _, e := range rec.eventsOf(ws.pid()) {
		if e.Kind == event.KindAlloc && e.OldSize != 0 && e.Func == 0 {
			weighed++
		}
	}
	for _, e := range rec.eventsOf(wp.pid()) {
		if e.OldSize != 0 && e.Kind == event.KindAlloc {
			t.Errorf("an allocation of the plain process weighed: %+v", e)
		}
		plainEvents++
	}
	if weighed == 0 || plainEvents == 0 {
		t.Errorf("%d weighed allocations of usdt_sampler, %d events of ebpf_alloc", weighed, plainEvents)
	}
	ws.release(t)
	ws.wait(t)
	wp.release(t)
	wp.wait(t)

	only := newTracer(t, Config{Source: SourceUSDT}, newRecorder(t))
	w := startWorkload(t, plain, "1")
	if err := only.Attach(w.pid()); err == nil || !strings.Contains(err.Error(), "otel_memory") {
		t.Errorf("SourceUSDT attached to a process without the probes: %v", err)
	}
	w.release(t)
	w.expect(t, "done")
	w.release(t)
	w.wait(t)
}

// TestUSDTSpec: the argument specs the BPF side reads, from the notes'.
func TestUSDTSpec(t *testing.T) {
	args, err := usdt.ParseArgs("8@%rbx -4@%esi 8@-16(%rbp)")
	if err != nil {
		t.Fatal(err)
	}
	s, err := usdtSpec(usdt.Probe{Provider: "otel_memory", Name: "alloc", Args: args}, event.HeapExe, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [3]struct {
		kind, shift, sign uint8
		val               uint64
		off               int64
	}{{usdtArgReg, 0, 0, 40, 0}, {usdtArgReg, 32, 1, 104, 0}, {usdtArgMem, 0, 0, 32, -16}}
	for i, w := range want {
		a := s.Arg[i]
		if a.Kind != w.kind || a.Shift != w.shift || a.Sign != w.sign || a.Val != w.val || a.Off != w.off {
			t.Errorf("argument %d: %+v, want %+v", i, a, w)
		}
	}
	if s.Heap != uint8(event.HeapExe) {
		t.Errorf("heap %d", s.Heap)
	}
	for _, bad := range []string{"8@%rax 8@%rbx", "8@%rax 8@16(%rax,%rbx,8) 8@%rcx", "8@%rax 8@x(%rip) 8@%rcx", "8@%rax 8@%xmm0 8@%rcx"} {
		args, err := usdt.ParseArgs(bad)
		if err != nil {
			continue
		}
		if _, err := usdtSpec(usdt.Probe{Provider: "otel_memory", Name: "alloc", Args: args}, event.HeapExe, 3); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestUSDTDlopen: a library with otel_memory probes of its own that a
// process traced through its probes loads after the attach has its probes
// found and attached too: the kernel raises its semaphores, and each probe
// it fires is an event with its weight and a stack through the library,
// its frees matched.
func TestUSDTDlopen(t *testing.T) {
	lib := testutil.MustBuild(t, "usdt_dlopenlib", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
	bin := testutil.MustBuild(t, "usdt_dlopen", testutil.Options{Flags: []string{"-ldl"}})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Source: SourceUSDT}, rec)
	w := startWorkload(t, bin, lib)
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	w.expect(t, "loaded")
	raised := false
	for deadline := time.Now().Add(30 * time.Second); !raised && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		w.release(t)
		raised = w.expect(t, "semaphores") == "semaphores 1"
	}
	if !raised {
		t.Fatal("the library's semaphores were not raised in 30 s")
	}
	w.release(t)
	w.expect(t, "done")
	mustFlush(t, tr)

	sym := symbolize.New(symbolize.Options{})
	defer sym.Close()
	for _, m := range rec.modules {
		sym.AddModule(m)
	}
	fn := func(e event.Event) string {
		for _, a := range rec.frames(w.pid(), e.Stack) {
			for _, f := range sym.Frames(e.PID, a) {
				if f.Function == "main_work" || f.Function == "lib_work" {
					return f.Function
				}
			}
		}
		return ""
	}
	weights, live := map[string]uint64{}, map[uint64]event.Event{}
	frees := 0
	for _, e := range rec.eventsOf(w.pid()) {
		switch e.Kind {
		case event.KindAlloc:
			weights[fn(e)] += e.OldSize
			live[e.Addr] = e
		case event.KindFree:
			if _, ok := live[e.Addr]; !ok {
				t.Errorf("a free of %#x, never seen allocated", e.Addr)
			}
			delete(live, e.Addr)
			frees++
		}
	}
	liveLib := uint64(0)
	for _, e := range live {
		if fn(e) == "lib_work" {
			liveLib += e.OldSize
		}
	}
	if want := map[string]uint64{"main_work": 500, "lib_work": 10000}; !reflect.DeepEqual(weights, want) || frees != 4 || liveLib != 6000 {
		t.Errorf("weights by function %v, %d frees, %d live in lib_work; want %v, 4 frees, 6000 live", weights, frees, liveLib, want)
	}
	w.release(t)
	w.wait(t)
}
