package query

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
	"github.com/heapscope/heapscope/tracefile"
)

// ErrInconsistent is returned by Wait when the index's pass met an
// allocation on a stack the heap model did not count: the two passes
// disagree, and the index's answers would be wrong.
var ErrInconsistent = errors.New("query: the index and the heap model disagree on the trace's stacks")

// Open reads the trace at path as `heapscope report` does (report.Load:
// its parallel decode, the heap model, the symbolizer), so that the
// whole trace's answers cost what the report costs, and returns an Index
// that answers them at once: its Report, Sites, and Quick for the flame
// graphs and tables of the whole trace. The windowed index (every block's
// lifetime) is built behind it, on goroutines of its own, from a second
// read of the file; Wait waits for it and Ready says whether it is there.
// The methods that need it (Span, Window, Timeline, Peak, Profile,
// WindowReport) wait for it themselves.
func Open(path string, o Options) (*Index, error) {
	r, err := tracefile.Open(path)
	if err != nil {
		return nil, err
	}
	h := r.Header()
	r.Close()
	rep, err := report.Load(path, report.LoadOptions{
		Symbolize:    o.Symbolize,
		Processes:    o.Processes,
		Suppressions: o.Suppressions,
		ReadProgress: o.ReadProgress,
	})
	if err != nil {
		return nil, err
	}
	x := &Index{File: path, Header: h, Report: rep, Warnings: rep.Trace.Warnings, ready: make(chan struct{}), after: o.IndexAfter,
		cacheDir: o.CacheDir, indexMap: o.IndexMap, saved: make(chan struct{}), indexProgress: o.IndexProgress}
	x.rules, x.supOpt = o.Suppressions, suppress.Options{Sysroot: o.Symbolize.Sysroot}

	// The report's stacks are the index's, and so are their frames: each
	// address symbolized once, by the report's pass, which keeps them (the
	// symbolizer's files are closed).
	pr := rep.Profile
	x.res = rep.Resolver()
	x.stacks = make([]stackRef, len(pr.Stacks))
	for i := range pr.Stacks {
		st := &pr.Stacks[i]
		x.stacks[i] = stackRef{pid: st.PID, id: st.ID, frames: st.Frames}
	}
	x.mergeSites()
	if len(x.rules) > 0 {
		m := suppress.NewMatcher(x.rules, x.supOpt)
		x.suppressed = make([]*suppress.Rule, len(x.sites))
		for _, s := range x.sites {
			x.suppressed[s.ID] = m.Match(s.Frames)
		}
	}
	x.quick = x.quickResult()
	if o.NoIndex {
		x.noIndex = true
		close(x.saved)
		return x, nil
	}
	go x.index(path, o.Processes)
	return x, nil
}

// background lowers the priority of the calling goroutine's thread (nice
// 10), for the rest of its life: the windowed index is built while the
// whole trace's answers are served, and those go first on a machine with
// few cores. The thread ends with the goroutine (it stays locked to it).
func background() {
	runtime.LockOSThread()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 10) // advice: without it, the same at normal priority
}

// ErrNotIndexed is returned by Wait, and by Build, with Options.NoIndex.
var ErrNotIndexed = errors.New("query: opened without its windowed index")

// Build is Open, and waits for the windowed index.
func Build(path string, o Options) (*Index, error) {
	x, err := Open(path, o)
	if err != nil {
		return nil, err
	}
	if err := x.Wait(context.Background()); err != nil {
		return nil, err
	}
	return x, nil
}

// Ready reports whether the windowed index is built (or failed: see Wait).
func (x *Index) Ready() bool {
	select {
	case <-x.ready:
		return true
	default:
		return false
	}
}

// Wait waits until the windowed index is built, or ctx ends, and returns
// why it could not be built, if it could not.
func (x *Index) Wait(ctx context.Context) error {
	if x.noIndex {
		return ErrNotIndexed
	}
	select {
	case <-x.ready:
		return x.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits for the index, for the methods that need it.
func (x *Index) await() { <-x.ready }

// index reads the columns from the index file, or builds them and then
// writes the file, and publishes them.
func (x *Index) index(path string, sel analyze.Processes) {
	defer close(x.saved)
	background()
	if x.after != nil {
		<-x.after
	}
	if x.Aggregate() {
		close(x.ready)
		return // snapshots: no per-event history to index
	}
	if x.cacheDir != "" {
		if name, err := cacheName(x.cacheDir, path, sel); err == nil {
			x.cacheFile = name
			if c, err := loadCache(name, len(x.stacks), x.indexMap); err == nil {
				x.publish(c)
				x.fromCache, x.mapped = true, c.mapped
				close(x.ready)
				return
			}
		}
	}
	c, err := x.build(path, sel)
	if err != nil {
		x.err = fmt.Errorf("indexing %s: %w", path, err)
		close(x.ready)
		return
	}
	x.publish(c)
	x.mapped = c.mapped
	close(x.ready)
	if x.cacheFile != "" {
		x.saveErr = x.writeCache(x.cacheFile)
	}
}

// publish makes c's columns x's.
func (x *Index) publish(c *Index) {
	x.evs, x.rows, x.ends, x.rowEnds, x.big, x.unmatched, x.unmatchedDT = c.evs, c.rows, c.ends, c.rowEnds, c.big, c.unmatched, c.unmatchedDT
	x.exits, x.weights = c.exits, c.weights
	x.threads, x.bigThread = c.threads, c.bigThread
	x.evs.x = x
	x.arenaOwner = c
}

// build reads the trace again through the builder alone (the model's work
// is done). The builder numbers stacks as the report's profile does, so
// that rows point at the sites already made.
func (x *Index) build(path string, sel analyze.Processes) (*Index, error) {
	b := newBuilder(x.Header.SampleRate)
	if x.buildInFile() {
		// Without a file, the build holds its rows in memory, as before.
		if a, err := newFileArena(b.x, x.cacheDir); err == nil {
			b.x.rows.arena, b.x.ends.arena, b.x.weights.arena = a, a, a
			b.x.mapped = true
		}
	}
	b.x.stacks = append([]stackRef(nil), x.stacks...)
	for i, st := range x.stacks {
		b.seed(st.pid, st.id, int32(i))
	}
	b.known = len(x.stacks)
	err := x.replay(path, b, sel)
	if err == nil && b.tooLarge {
		err = ErrTooLarge
	}
	if err == nil && b.unknown >= 0 {
		st := b.x.stacks[b.unknown]
		err = fmt.Errorf("stack %d of process %d: %w", st.id, st.pid, ErrInconsistent)
	}
	if err != nil {
		return nil, err
	}
	return b.finish(), nil
}

// buildInFile says whether the index's rows and ends are built in a file
// of the cache folder rather than in memory: with MapAlways, or with
// MapAuto when they would pass a quarter of the memory available (about
// 32 bytes an event: a row of 28 and an end of 4 for most blocks).
func (x *Index) buildInFile() bool {
	if x.cacheDir == "" || x.indexMap == MapNever || ownDir(x.cacheDir) != nil {
		return false
	}
	return mapFile(x.indexMap, int64(x.Report.Profile.Summary.Events)*32)
}

// CacheFile returns the index file of x ("" without Options.CacheDir) and
// whether x's columns were read from it rather than built.
func (x *Index) CacheFile() (file string, read bool) {
	x.await()
	return x.cacheFile, x.fromCache
}

// Mapped reports whether x's rows and ends are file pages rather than
// memory: its index file mapped, or built in a file (see
// Options.IndexMap). It waits for the index; false without one.
func (x *Index) Mapped() bool {
	if x.noIndex {
		return false
	}
	x.await()
	return x.mapped
}

// WaitSaved waits until the index file is written (or was read, or there
// is none) and returns why it could not be written.
func (x *Index) WaitSaved() error {
	<-x.saved
	return x.saveErr
}

// replay feeds the trace's events to b, through a filter of sel's
// processes, on a goroutine of b's own (see async).
func (x *Index) replay(path string, b *builder, sel analyze.Processes) error {
	r, err := tracefile.OpenCounting(path, x.indexProgress)
	if err != nil {
		return err
	}
	defer r.Close()
	a := newAsync(b)
	var sink event.Sink = a
	if !sel.All() {
		sink = analyze.NewFilter(sink, sel)
	}
	err = r.Replay(sink, tracefile.Window{})
	a.wait()
	return err
}
