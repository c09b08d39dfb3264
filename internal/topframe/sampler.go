// Package topframe turns a session's per-stack totals (heapscope.Top, which
// the session keeps from the events it has in hand) into the frames
// `heapscope top` shows: symbolized sites, named and merged as the reports
// do (package symbolize), with rates, growth and history.
package topframe

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// Source answers a top query: Session.Top for a session of this process,
// heapscope.Top for one by name.
type Source func(heapscope.TopQuery) (heapscope.TopResult, error)

// Frame is what top shows at one refresh.
type Frame struct {
	Time    time.Time
	Elapsed time.Duration // since the previous frame; 0 for the first
	PID     uint32        // the process shown; 0: all
	TID     uint32        // the thread shown (of PID); 0: all
	PIDs    []uint32      // the processes of the session
	TIDs    []uint32      // the threads of process PID that allocated; nil when PID is 0
	Live    uint64        // bytes live now (of what is shown)
	Blocks  uint64
	History []uint64 // Live at each of the last frames, oldest first
	Allocs  float64  // allocation and reallocation calls per second over the last interval
	Frees   float64  // frees per second over the last interval
	Stats   event.Stats
	// HasStats: Stats holds the session's counters.
	HasStats bool
	Sites    []Site // the sites the session sent, largest first by the order asked
	// NoTemporaries: the session cannot tell temporaries (eBPF aggregate
	// mode, or sampling); Site.Temporary means nothing.
	NoTemporaries bool
	// Seeded: the totals include what the session traced before top asked.
	Seeded bool
	// Scanned: a leak check classified the blocks shown: Site.Lost says
	// what it found lost.
	Scanned bool
	Ended   bool // the session has ended
	// SampleRate is the session's sampling rate, 0 when exact: the counts
	// are then estimates.
	SampleRate int64
	// Reading: the session is reading back its trace file (a top that
	// joined a running session), ReadBytes of ReadSize so far; the frame
	// has no totals or sites yet.
	Reading             bool
	ReadBytes, ReadSize int64
}

// Site is one call site's row.
type Site struct {
	Stack     []symbolize.Frame // innermost first, the allocator's frames dropped
	Live      uint64
	Blocks    uint64
	Growth    float64 // change in Live per second over the last interval
	HasGrowth bool    // false on the first frame
	Calls     uint64  // allocation and reallocation calls since the totals began
	Temporary uint64
	// Lost is what of Live the session's latest leak check found lost
	// (definitely and indirectly); see Frame.Scanned.
	Lost uint64
	key  string
}

// Name is the site's name, as the reports and serve name it (its first
// frame that is not an allocator wrapper, symbolize.SiteFrame), with its
// file and line.
func (s *Site) Name() string {
	if len(s.Stack) == 0 {
		return symbolize.NoStack
	}
	f := &s.Stack[symbolize.SiteFrame(len(s.Stack), func(i int) *symbolize.Frame { return &s.Stack[i] })]
	name := f.Name()
	if f.File != "" && f.Line > 0 {
		name += " (" + f.File[strings.LastIndexByte(f.File, '/')+1:] + ":" + strconv.Itoa(f.Line) + ")"
	}
	return name
}

// Order is a sort order of sites.
type Order int

// The orders top offers.
const (
	ByLive Order = iota
	ByGrowth
	ByCalls
	ByTemporary
	numOrders
)

var orderNames = [numOrders]string{"live", "growth", "calls", "temporaries"}

var topOrders = [numOrders]heapscope.TopOrder{heapscope.TopByLive, heapscope.TopByGrowth, heapscope.TopByCalls, heapscope.TopByTemporary}

func (o Order) String() string {
	if o >= 0 && o < numOrders {
		return orderNames[o]
	}
	return "order(" + strconv.Itoa(int(o)) + ")"
}

// Next is the order after o, in the cycle live → growth → calls →
// temporaries.
func (o Order) Next() Order { return (o + 1) % numOrders }

// Sort sorts the frame's sites by o, largest first.
func (f *Frame) Sort(o Order) {
	key := func(s *Site) float64 {
		switch o {
		case ByGrowth:
			return s.Growth
		case ByCalls:
			return float64(s.Calls)
		case ByTemporary:
			return float64(s.Temporary)
		}
		return float64(s.Live)
	}
	sort.SliceStable(f.Sites, func(i, j int) bool {
		a, b := key(&f.Sites[i]), key(&f.Sites[j])
		if a != b {
			return a > b
		}
		if f.Sites[i].Live != f.Sites[j].Live {
			return f.Sites[i].Live > f.Sites[j].Live
		}
		return f.Sites[i].key < f.Sites[j].key
	})
}

// historyLen is how many frames History keeps: two minutes at the default
// interval of a second.
const historyLen = 120

// Sampler turns a session's answers into frames. It is not safe for
// concurrent use.
type Sampler struct {
	src      Source
	client   string
	sym      *symbolize.Symbolizer
	nmod     int
	prevView [2]uint32 // the PID and TID of the previous frame
	prev     *heapscope.TopResult
	last     *Frame
	history  []uint64
	// minElapsed is TopQuery.MinElapsed: a few events delivered just
	// after a refresh make no rate.
	minElapsed int64
}

// NewSampler samples src every interval (or so): rates are measured over
// at least half of it.
func NewSampler(src Source, interval time.Duration, o symbolize.Options) *Sampler {
	var id [8]byte
	rand.Read(id[:])
	return &Sampler{src: src, client: "top-" + hex.EncodeToString(id[:]), sym: symbolize.New(o), minElapsed: int64(interval / 2)}
}

// Close releases the symbolizer.
func (s *Sampler) Close() error { return s.sym.Close() }

// Sample asks the session for the n first sites in order o of process pid
// (0: all) and thread tid of it (0: all).
func (s *Sampler) Sample(pid, tid uint32, o Order, n int) (*Frame, error) {
	r, err := s.src(heapscope.TopQuery{Client: s.client, N: n, Order: topOrders[o], PID: pid, TID: tid, Modules: s.nmod, MinElapsed: s.minElapsed})
	if err != nil {
		return nil, err
	}
	if r.Reading {
		// No totals yet: the next frame is the first.
		return &Frame{Time: time.Now(), PID: pid, TID: tid, Stats: r.Stats, HasStats: true, Ended: r.Ended,
			SampleRate: r.SampleRate, Reading: true, ReadBytes: r.ReadBytes, ReadSize: r.ReadSize}, nil
	}
	for _, m := range r.Modules {
		s.sym.AddModule(m)
	}
	s.nmod = r.NModules
	f := &Frame{Time: time.Now(), PID: pid, TID: tid, Live: r.Totals.LiveBytes, Blocks: r.Totals.LiveBlocks,
		Stats: r.Stats, HasStats: true, NoTemporaries: r.Aggregate || r.SampleRate > 0, Seeded: r.Seeded, Ended: r.Ended, SampleRate: r.SampleRate,
		Scanned: r.Scanned}
	for _, p := range r.Processes {
		f.PIDs = append(f.PIDs, p.PID)
		if p.PID == pid {
			f.TIDs = p.Threads
		}
	}
	same := s.prev != nil && s.prevView == [2]uint32{pid, tid}
	secs := float64(r.Elapsed) / 1e9
	f.Elapsed = time.Duration(r.Elapsed)
	if same && secs > 0 {
		f.Allocs = float64(r.Totals.Allocs-s.prev.Totals.Allocs) / secs
		f.Frees = float64(r.Totals.Frees-s.prev.Totals.Frees) / secs
	}
	// Stacks that differ only inside the allocator, or in their process,
	// are one site.
	at := map[string]int{}
	for i := range r.Sites {
		rs := &r.Sites[i]
		var st []symbolize.Frame
		for _, a := range rs.Frames {
			st = append(st, s.sym.Frames(rs.PID, a)...)
		}
		st = symbolize.TrimAllocator(st)
		k := symbolize.SiteKey(st)
		j, ok := at[k]
		if !ok {
			j = len(f.Sites)
			at[k] = j
			f.Sites = append(f.Sites, Site{Stack: st, key: k, HasGrowth: secs > 0})
		}
		row := &f.Sites[j]
		row.Live += rs.LiveBytes
		row.Blocks += rs.LiveBlocks
		row.Calls += rs.Allocs
		row.Temporary += rs.Temporary
		row.Lost += rs.LostBytes
		if secs > 0 {
			row.Growth += float64(rs.Growth) / secs
		}
	}
	if same && secs == 0 && s.last != nil {
		// Nothing new since the last frame (the session delivers its
		// events every flush interval, which may be longer than
		// top's): the last rates stand.
		f.Allocs, f.Frees = s.last.Allocs, s.last.Frees
		g := map[string]float64{}
		for _, st := range s.last.Sites {
			g[st.key] = st.Growth
		}
		for i := range f.Sites {
			f.Sites[i].Growth, f.Sites[i].HasGrowth = g[f.Sites[i].key], s.last.Elapsed > 0
		}
		f.Elapsed = s.last.Elapsed
	}
	f.Sort(o)
	if !same {
		s.history = s.history[:0]
	}
	s.history = append(s.history, f.Live)
	if len(s.history) > historyLen {
		s.history = s.history[len(s.history)-historyLen:]
	}
	f.History = append([]uint64(nil), s.history...)
	s.prev, s.prevView, s.last = &r, [2]uint32{pid, tid}, f
	return f, nil
}
