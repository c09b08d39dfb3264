package live

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// Frame is what top shows at one refresh.
type Frame struct {
	Time     time.Time
	Elapsed  time.Duration // since the previous frame; 0 for the first
	PID      uint32        // the process shown; 0: all
	PIDs     []uint32      // the processes in the trace
	Live     uint64        // bytes live now (of the process shown)
	Blocks   uint64
	History  []uint64 // Live at each of the last frames, oldest first
	Allocs   float64  // allocation and reallocation calls per second over the last interval
	Frees    float64  // frees per second over the last interval
	Stats    event.Stats
	HasStats bool
	Sites    []Site // every site with live bytes, calls or temporaries, unsorted
	// NoTemporaries: the trace cannot tell temporaries (an aggregate
	// trace); Site.Temporary is 0.
	NoTemporaries bool
}

// Site is one call site's row.
type Site struct {
	Stack     []symbolize.Frame // innermost first, the allocator's frames dropped
	Live      uint64
	Blocks    uint64
	Growth    float64 // change in Live per second over the last interval
	HasGrowth bool    // false on the first frame that shows the site's process
	Calls     uint64  // allocation and reallocation calls since the session started
	Temporary uint64
	key       string
}

// Name is the site's innermost frame, as one word.
func (s *Site) Name() string {
	if len(s.Stack) == 0 {
		return "[no stack]"
	}
	f := s.Stack[0]
	name := f.Function
	if name == "" {
		if f.Module != "" {
			name = f.Module[strings.LastIndexByte(f.Module, '/')+1:] + "+0x" + strconv.FormatUint(f.Offset, 16)
		} else {
			name = "0x" + strconv.FormatUint(f.Address, 16)
		}
	}
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

// Sampler turns a Tail into frames.
type Sampler struct {
	t        *Tail
	prevTime time.Time
	prevEnd  int64 // the trace time of the last record read at the previous frame
	prevPID  uint32
	prevLive map[string]uint64 // by site key, for the process shown
	prevCall uint64
	prevFree uint64
	history  []uint64
	last     *Frame
}

// NewSampler samples t.
func NewSampler(t *Tail) *Sampler { return &Sampler{t: t} }

// Sample polls the file and returns a frame of process pid (0: all).
func (s *Sampler) Sample(pid uint32) (*Frame, error) {
	n, err := s.t.Poll()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if n == 0 && s.last != nil && s.last.PID == pid {
		// Nothing new in the file (the session flushes less often than
		// the frames come): the last frame stands, its rates too.
		f := *s.last
		f.Time = now
		return &f, nil
	}
	p := s.t.Profile()
	end := p.End
	f := &Frame{Time: now, PID: pid, Stats: p.Stats, HasStats: p.HasStats, NoTemporaries: p.Missing.Has(analyze.NoTemporaries)}
	for _, pr := range p.Processes {
		f.PIDs = append(f.PIDs, pr.PID)
	}
	if pid != 0 {
		p = ForPID(p, pid)
	}
	rep := s.t.Report(p)
	var calls, frees uint64
	for _, st := range p.Stacks {
		calls += st.Allocations + st.Reallocations
		frees += st.Frees
	}
	samePID := s.prevLive != nil && s.prevPID == pid
	if !s.prevTime.IsZero() {
		f.Elapsed = now.Sub(s.prevTime)
	}
	// Rates are over the trace's time between the last records of the two
	// frames: what was read, not when it was read (the file lags the
	// session by up to a flush, and a busy machine delays the polls).
	// Without records before and after, there is no rate to give.
	secs := 0.0
	if s.prevEnd != 0 && end > s.prevEnd {
		secs = float64(end-s.prevEnd) / 1e9
	}
	if samePID && secs > 0 {
		f.Allocs = float64(calls-s.prevCall) / secs
		f.Frees = float64(frees-s.prevFree) / secs
	}
	live := map[string]uint64{}
	for _, rs := range rep.Sites {
		st := rs.Stack()
		row := Site{Stack: st, Live: rs.LiveBytes, Blocks: rs.LiveBlocks,
			Calls: rs.Allocations + rs.Reallocations, Temporary: rs.Temporary, key: siteKey(st)}
		live[row.key] += row.Live
		f.Live += row.Live
		f.Blocks += row.Blocks
		f.Sites = append(f.Sites, row)
	}
	for i := range f.Sites {
		row := &f.Sites[i]
		if samePID && secs > 0 {
			row.Growth = (float64(live[row.key]) - float64(s.prevLive[row.key])) / secs
			row.HasGrowth = true
		}
	}
	if !samePID {
		s.history = s.history[:0]
	}
	s.history = append(s.history, f.Live)
	if len(s.history) > historyLen {
		s.history = s.history[len(s.history)-historyLen:]
	}
	f.History = append([]uint64(nil), s.history...)
	s.last = f
	s.prevTime, s.prevPID, s.prevLive, s.prevCall, s.prevFree = now, pid, live, calls, frees
	s.prevEnd = end
	return f, nil
}

// siteKey is a site's stack without addresses: the same site merges across
// processes and refreshes.
func siteKey(st []symbolize.Frame) string {
	var b strings.Builder
	for _, f := range st {
		b.WriteString(f.Function)
		b.WriteByte(0)
		b.WriteString(f.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(f.Line))
		if f.Function == "" {
			b.WriteString(f.Module)
			b.WriteString("+")
			b.WriteString(strconv.FormatUint(f.Offset, 16))
		}
		b.WriteByte(1)
	}
	return b.String()
}
