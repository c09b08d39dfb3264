//go:build linux && amd64

package preload

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// recorder is a Sink that keeps everything and checks, record by record,
// what the Sink contract promises: a Process before a process's records, a
// Stack before the events that use it, a Module covering every frame of a
// stack before the stack, events of a process in time order.
type recorder struct {
	procs   []event.Process
	exits   []event.Exit
	modules []event.Module
	stacks  map[uint64]event.Stack // by PID<<32 | ID
	events  []event.Event
	image   []int // per event: how many Process records its PID had then
	stats   []event.Stats
	notes   []event.Note
	errs    []string

	active  map[uint32]bool
	mods    map[uint32][]event.Module // modules of the current image
	last    map[uint32]int64
	started map[uint32]int64
	images  map[uint32]int
}

func newRecorder() *recorder {
	return &recorder{
		stacks: map[uint64]event.Stack{}, active: map[uint32]bool{}, mods: map[uint32][]event.Module{},
		last: map[uint32]int64{}, started: map[uint32]int64{}, images: map[uint32]int{},
	}
}

func (r *recorder) fail(format string, args ...any) {
	if len(r.errs) < 20 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

func (r *recorder) Process(p event.Process) error {
	if r.active[p.PID] {
		r.fail("Process for pid %d twice without an Exit", p.PID)
	}
	r.active[p.PID] = true
	r.mods[p.PID] = nil
	r.last[p.PID] = p.Time
	r.started[p.PID] = p.Time
	r.images[p.PID]++
	r.procs = append(r.procs, p)
	return nil
}

func (r *recorder) Exit(e event.Exit) error {
	if !r.active[e.PID] {
		r.fail("Exit for pid %d not traced", e.PID)
	}
	if e.Time < r.last[e.PID] {
		r.fail("Exit of pid %d at %d before its last event at %d", e.PID, e.Time, r.last[e.PID])
	}
	r.active[e.PID] = false
	r.exits = append(r.exits, e)
	return nil
}

func (r *recorder) Module(m event.Module) error {
	if !r.active[m.PID] {
		r.fail("Module for pid %d before its Process", m.PID)
	}
	if m.End <= m.Start || m.Path == "" {
		r.fail("bad module %+v", m)
	}
	r.mods[m.PID] = append(r.mods[m.PID], m)
	r.modules = append(r.modules, m)
	return nil
}

func (r *recorder) covered(pid uint32, a uint64) bool {
	for _, m := range r.mods[pid] {
		if a >= m.Start && a < m.End {
			return true
		}
	}
	return false
}

func (r *recorder) Stack(s event.Stack) error {
	if !r.active[s.PID] {
		r.fail("Stack for pid %d before its Process", s.PID)
	}
	key := uint64(s.PID)<<32 | uint64(s.ID)
	if _, dup := r.stacks[key]; dup {
		r.fail("stack %d of pid %d sent twice", s.ID, s.PID)
	}
	if s.ID == 0 || len(s.Frames) == 0 {
		r.fail("empty or zero stack %+v", s)
	}
	for _, f := range s.Frames {
		if !r.covered(s.PID, f) {
			r.fail("pid %d stack %d: frame %#x in no module sent before it", s.PID, s.ID, f)
		}
	}
	r.stacks[key] = s
	return nil
}

func (r *recorder) Events(evs []event.Event) error {
	for _, e := range evs {
		if !r.active[e.PID] {
			r.fail("event of pid %d outside its Process and Exit", e.PID)
		}
		if e.Stack != 0 {
			if _, ok := r.stacks[uint64(e.PID)<<32|uint64(e.Stack)]; !ok {
				r.fail("event of pid %d uses stack %d before it was sent", e.PID, e.Stack)
			}
		}
		if e.Time < r.last[e.PID] {
			r.fail("pid %d: event at %d after one at %d", e.PID, e.Time, r.last[e.PID])
		}
		r.last[e.PID] = e.Time
		if !e.Kind.Valid() || e.Func.Family() == 0 || e.TID == 0 {
			r.fail("malformed event %+v", e)
		}
		r.image = append(r.image, r.images[e.PID])
	}
	r.events = append(r.events, evs...)
	return nil
}

func (r *recorder) Snapshot(event.Snapshot) error { r.fail("unexpected Snapshot"); return nil }
func (r *recorder) Stats(s event.Stats) error     { r.stats = append(r.stats, s); return nil }
func (r *recorder) Note(n event.Note) error {
	if w, ok := n.(event.Warning); ok && !r.active[w.PID] {
		r.fail("Warning of pid %d outside its Process and Exit", w.PID)
	}
	r.notes = append(r.notes, n)
	return nil
}

// warnings are the Warning notes the sink got.
func (r *recorder) warnings() []event.Warning {
	var ws []event.Warning
	for _, n := range r.notes {
		if w, ok := n.(event.Warning); ok {
			ws = append(ws, w)
		}
	}
	return ws
}

// check fails the test if any record broke the contract, or the session
// ended without its final Stats or with a traced process not ended.
func (r *recorder) check(t testing.TB) {
	t.Helper()
	for pid, on := range r.active {
		if on {
			r.fail("pid %d has no Exit", pid)
		}
	}
	if len(r.stats) == 0 {
		r.fail("no Stats record")
	}
	if len(r.errs) > 0 {
		t.Fatalf("sink contract broken:\n  %s", strings.Join(r.errs, "\n  "))
	}
}

// final is the last Stats record.
func (r *recorder) final() event.Stats {
	if len(r.stats) == 0 {
		return event.Stats{}
	}
	return r.stats[len(r.stats)-1]
}

// stack returns the frames of an event's stack.
func (r *recorder) stack(e event.Event) []uint64 {
	if e.Stack == 0 {
		return nil
	}
	return r.stacks[uint64(e.PID)<<32|uint64(e.Stack)].Frames
}

// ---- symbols ----

type symtab struct {
	progs []elf.ProgHeader
	funcs []elf.Symbol // sorted by Value
}

var (
	symMu    sync.Mutex
	symFiles = map[string]*symtab{}
)

func loadSymtab(path string) *symtab {
	symMu.Lock()
	defer symMu.Unlock()
	if s, ok := symFiles[path]; ok {
		return s
	}
	s := &symtab{}
	symFiles[path] = s
	f, err := elf.Open(path)
	if err != nil {
		return s
	}
	defer f.Close()
	for _, p := range f.Progs {
		s.progs = append(s.progs, p.ProgHeader)
	}
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	for _, sym := range append(syms, dyn...) {
		if elf.ST_TYPE(sym.Info) == elf.STT_FUNC && sym.Value != 0 {
			s.funcs = append(s.funcs, sym)
		}
	}
	sort.Slice(s.funcs, func(i, j int) bool { return s.funcs[i].Value < s.funcs[j].Value })
	return s
}

// funcAt names the function holding the return address a in process pid,
// through the modules the collector sent; "" if unknown.
func (r *recorder) funcAt(pid uint32, a uint64) string {
	for i := len(r.modules) - 1; i >= 0; i-- {
		m := r.modules[i]
		if m.PID != pid || a < m.Start || a >= m.End {
			continue
		}
		s := loadSymtab(m.Path)
		for _, p := range s.progs {
			if p.Type != elf.PT_LOAD || p.Off != m.Offset || p.Flags&elf.PF_X == 0 {
				continue
			}
			v := a - 1 - m.Start + p.Vaddr // a return address: look at the call
			i := sort.Search(len(s.funcs), func(i int) bool { return s.funcs[i].Value > v }) - 1
			if i >= 0 && v < s.funcs[i].Value+s.funcs[i].Size {
				return s.funcs[i].Name
			}
		}
		return ""
	}
	return ""
}

// site names the innermost frame of an event's stack; code GCC moved out of
// line (f.cold) counts as its function's.
func (r *recorder) site(e event.Event) string {
	f := r.stack(e)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimSuffix(r.funcAt(e.PID, f[0]), ".cold")
}

// chain names all the frames of an event's stack.
func (r *recorder) chain(e event.Event) []string {
	var out []string
	for _, f := range r.stack(e) {
		out = append(out, r.funcAt(e.PID, f))
	}
	return out
}

// ---- running workloads ----

// result is a traced run of one command.
type result struct {
	*recorder
	pid    int
	stdout string
	state  *os.ProcessState
}

// traceCmd runs cmd traced by a new collector with cfg, to its end, then
// closes the collector, checking the sink contract.
func traceCmd(t testing.TB, cfg Config, cmd *exec.Cmd) *result {
	t.Helper()
	return traceCmdWith(t, cfg, nil, cmd)
}

// traceCmdWith is traceCmd that hands the collector to use first.
func traceCmdWith(t testing.TB, cfg Config, use func(*Collector), cmd *exec.Cmd) *result {
	t.Helper()
	rec := newRecorder()
	c, err := New(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	if use != nil {
		use(c)
	}
	if err := c.Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = io.Discard
	}
	if err := cmd.Start(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	werr := cmd.Wait()
	reportExit(c, cmd)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		if _, ok := werr.(*exec.ExitError); !ok {
			t.Fatal(werr)
		}
	}
	rec.check(t)
	return &result{recorder: rec, pid: cmd.Process.Pid, stdout: out.String(), state: cmd.ProcessState}
}

// trace runs bin with args traced.
func trace(t testing.TB, cfg Config, bin string, args ...string) *result {
	t.Helper()
	return traceCmd(t, cfg, exec.Command(bin, args...))
}

// traceWith runs bin with args traced, handing the collector to use.
func traceWith(t testing.TB, cfg Config, use func(*Collector), bin string, args ...string) *result {
	t.Helper()
	return traceCmdWith(t, cfg, use, exec.Command(bin, args...))
}

// reportExit tells c how cmd ended, as a launcher would.
func reportExit(c *Collector, cmd *exec.Cmd) {
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		c.Exited(cmd.Process.Pid, 0, int(ws.Signal()))
	} else {
		c.Exited(cmd.Process.Pid, ws.ExitStatus(), 0)
	}
}

// of returns the events of pid.
func (r *result) of(pid int) []event.Event {
	var out []event.Event
	for _, e := range r.events {
		if int(e.PID) == pid {
			out = append(out, e)
		}
	}
	return out
}

// bySite counts the events of pid per innermost function and func, and
// sums their sizes.
type siteKey struct {
	site string
	fn   event.Func
}

type siteCount struct {
	calls, bytes uint64
}

func (r *result) bySite(pid int) map[siteKey]siteCount {
	m := map[siteKey]siteCount{}
	for _, e := range r.of(pid) {
		k := siteKey{r.site(e), e.Func}
		c := m[k]
		c.calls++
		c.bytes += e.Size
		m[k] = c
	}
	return m
}
