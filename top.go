package heapscope

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/totals"
	"github.com/heapscope/heapscope/tracefile"
)

// TopOrder is the order of the sites Top returns.
type TopOrder string

// The orders Top offers.
const (
	TopByLive      TopOrder = "live"        // live bytes
	TopByGrowth    TopOrder = "growth"      // change in live bytes since the client's previous query
	TopByCalls     TopOrder = "calls"       // allocation and reallocation calls
	TopByTemporary TopOrder = "temporaries" // blocks freed right after they were made
)

// MaxTopSites bounds TopQuery.N.
const MaxTopSites = 1000

// TopQuery asks a session for its sites (Session.Top, or the control
// operation "top" through Top).
type TopQuery struct {
	// Client names the caller, as it likes: Growth is the change since the
	// previous query of the same Client.
	Client string   `json:"client"`
	N      int      `json:"n"` // sites wanted: 1 to MaxTopSites (default 20)
	Order  TopOrder `json:"order,omitempty"`
	PID    uint32   `json:"pid,omitempty"` // only this process; 0: all
	TID    uint32   `json:"tid,omitempty"` // only this thread of PID; 0: all threads
	// Modules is how many module records the caller has from earlier
	// answers: only the later ones are sent.
	Modules int `json:"modules,omitempty"`
	// MinElapsed (ns) is the shortest span of the session's time a growth
	// is measured over: an answer that comes sooner after the previous one
	// (the session delivered a few events since) has Elapsed 0 and no
	// growth, and the next is measured from the previous one's time.
	MinElapsed int64 `json:"min_elapsed,omitempty"`
}

// TopResult is a session's heap by site, now.
type TopResult struct {
	// Time is how far the totals go: the time of the latest event the
	// session has delivered (CLOCK_MONOTONIC ns). Elapsed is Time less
	// that of the client's previous query: 0 on its first, and when
	// nothing new came (the session delivers every flush interval).
	Time    int64 `json:"time"`
	Elapsed int64 `json:"elapsed"`
	// Seeded: the totals include what the session traced before the first
	// query (read back from its trace file). Otherwise they begin at the
	// first query (a realtime, circular or newfile session).
	Seeded    bool `json:"seeded"`
	Aggregate bool `json:"aggregate,omitempty"` // some process is counted by eBPF's aggregate snapshots: no temporaries, no threads
	// Scanned: a leak check classified the blocks of a process shown: the
	// sites have lost, possibly lost and still reachable bytes.
	Scanned   bool           `json:"scanned,omitempty"`
	Totals    TopSite        `json:"totals"`    // of the processes and threads selected; Frames nil
	Unmatched uint64         `json:"unmatched"` // frees of blocks never seen allocated
	Processes []TopProcess   `json:"processes"`
	Sites     []TopSite      `json:"sites"`
	Modules   []event.Module `json:"modules,omitempty"` // the module records from TopQuery.Modules on
	NModules  int            `json:"n_modules"`         // module records in all
	Stats     event.Stats    `json:"stats"`
	Ended     bool           `json:"ended,omitempty"` // the session has ended: this is its last state
	// SampleRate is the session's sampling rate (Properties.Sample), 0
	// when exact: the totals are then estimates, each recorded block
	// counted at the bytes and objects it stands for, as reports count a
	// sampled trace.
	SampleRate int64 `json:"sample_rate,omitempty"`
	// Reading: the session is reading back its trace file, which the
	// first query started (see Top), and has read ReadBytes of ReadSize;
	// the answer has no totals, sites or processes until it is done.
	Reading   bool  `json:"reading,omitempty"`
	ReadBytes int64 `json:"read_bytes,omitempty"`
	ReadSize  int64 `json:"read_size,omitempty"`
}

// TopProcess is a traced process and its threads.
type TopProcess struct {
	PID     uint32   `json:"pid"`
	PPID    uint32   `json:"ppid,omitempty"`
	Exe     string   `json:"exe,omitempty"`
	Cmdline []string `json:"cmdline,omitempty"`
	Threads []uint32 `json:"threads,omitempty"` // the threads that allocated or freed
	Ended   bool     `json:"ended,omitempty"`
}

// TopSite is one stack's totals in one process (or one thread, when the
// query names one).
type TopSite struct {
	PID        uint32   `json:"pid"`
	TID        uint32   `json:"tid,omitempty"`
	Frames     []uint64 `json:"frames,omitempty"` // return addresses, innermost first
	LiveBytes  uint64   `json:"live_bytes"`
	LiveBlocks uint64   `json:"live_blocks"`
	Allocs     uint64   `json:"allocs"` // allocation and reallocation calls
	AllocBytes uint64   `json:"alloc_bytes"`
	Frees      uint64   `json:"frees"`
	Temporary  uint64   `json:"temporary"`
	// Growth is the change in LiveBytes since the client's previous query
	// (0 on its first): over TopResult.Elapsed.
	Growth int64 `json:"growth"`
	// What of LiveBytes a leak check (Leaks) found lost (definitely and
	// indirectly), possibly lost and still reachable; 0 until one did
	// (TopResult.Scanned).
	LostBytes      uint64 `json:"lost_bytes,omitempty"`
	PossibleBytes  uint64 `json:"possible_bytes,omitempty"`
	ReachableBytes uint64 `json:"reachable_bytes,omitempty"`
}

// Top returns the sites of the live session named name, which may run in
// any process (the control operation "top"). The session keeps the totals
// only while some client asks: its first query turns them on (reading back
// what the session's trace file holds so far), and they are dropped when no
// client has asked for a while (topLease). A session that exports
// (Properties.Export) keeps them from its start, and top shares them.
func Top(name string, q TopQuery) (TopResult, error) {
	var r TopResult
	err := call(name, "top", q, &r)
	return r, err
}

// topLease is how long a session keeps its totals after the last query (a
// variable for tests: subscribe hands it to expireTop).
var topLease = 30 * time.Second

// topState is the session's side of Top.
type topState struct {
	mu     sync.Mutex // held by a query
	on     bool
	gen    int // subscriptions so far: a read-back of an expired one is dropped
	seeded bool
	// fromStart: the totals were on from the session's start (for a leak
	// check at exit of a session whose file cannot be read back), and
	// are kept (keepTotals).
	fromStart bool
	clients   map[string]*topClient
	last      time.Time
	// reading: the trace file is being read back (see subscribe); read
	// counts the bytes read of readSize (one counter per read-back: that of
	// an expired subscription may still run).
	reading  bool
	readDone chan struct{} // closed when the read-back is done
	read     *atomic.Int64
	readSize int64
}

// readBackWait is how long a query waits for the read-back of the trace
// file before it answers with its progress instead.
var readBackWait = 250 * time.Millisecond

// maxTopClients bounds the clients a session remembers (each holds every
// site's live bytes): a new one past it makes the session forget the one
// that asked least recently, whose next growth is then its first.
const maxTopClients = 64

// makeRoom forgets the client seen least recently if there are
// maxTopClients.
func (ts *topState) makeRoom() {
	if len(ts.clients) < maxTopClients {
		return
	}
	var oldest string
	var seen time.Time
	for name, c := range ts.clients {
		if seen.IsZero() || c.seen.Before(seen) {
			oldest, seen = name, c.seen
		}
	}
	delete(ts.clients, oldest)
}

// topClient is what one client saw at its previous query.
type topClient struct {
	totals totals.Client
	seen   time.Time // its last query: clients gone for topLease are dropped
}

// Top returns the session's sites. See the package function Top.
func (s *Session) Top(q TopQuery) (TopResult, error) {
	if q.N == 0 {
		q.N = 20
	}
	if q.N < 0 || q.N > MaxTopSites {
		return TopResult{}, fmt.Errorf("top: %d sites asked, 1 to %d: %w", q.N, MaxTopSites, errs.ErrInvalidFlags)
	}
	switch q.Order {
	case "":
		q.Order = TopByLive
	case TopByLive, TopByGrowth, TopByCalls, TopByTemporary:
	default:
		return TopResult{}, fmt.Errorf("top: unknown order %q: %w", q.Order, errs.ErrInvalidFlags)
	}
	ts := &s.top
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.on {
		if err := s.subscribe(); err != nil {
			return TopResult{}, err
		}
	}
	ts.last = time.Now()
	c := ts.clients[q.Client]
	if c == nil {
		ts.makeRoom()
		c = &topClient{}
		ts.clients[q.Client] = c
	}
	c.seen = ts.last
	if ts.reading {
		// A short file is read back before the answer, as if at once.
		done := ts.readDone
		ts.mu.Unlock()
		select {
		case <-done:
		case <-time.After(readBackWait):
		}
		ts.mu.Lock()
	}
	stats := s.Stats()
	if ts.reading {
		// The totals come with the read-back: until then, how far it is.
		s.sink.mu.Lock()
		ended := s.sink.closed
		s.sink.mu.Unlock()
		return TopResult{Reading: true, ReadBytes: ts.read.Load(), ReadSize: ts.readSize, Stats: stats, Ended: ended,
			SampleRate: int64(s.props.Sample)}, nil
	}

	// Copy what the answer needs under the sink's lock (the collector
	// waits meanwhile), and sort outside it.
	sk := s.sink
	sk.mu.Lock()
	v := sk.agg.View(q.PID, q.TID, q.Modules)
	ended := sk.closed
	sk.mu.Unlock()
	rows, sum, elapsed := v.Rows(&c.totals, topOrders[q.Order], q.N, q.MinElapsed)
	r := TopResult{Time: v.Time, Elapsed: elapsed, Seeded: ts.seeded, Aggregate: v.Aggregate, Scanned: v.Scanned, Totals: TopSite(sum),
		Unmatched: v.Unmatched, Modules: v.Modules, NModules: v.NModules, Stats: stats, Ended: ended, SampleRate: int64(s.props.Sample)}
	for _, p := range v.Processes {
		r.Processes = append(r.Processes, TopProcess(p))
	}
	for _, row := range rows {
		r.Sites = append(r.Sites, TopSite(row))
	}
	return r, nil
}

var topOrders = map[TopOrder]totals.Order{TopByLive: totals.ByLive, TopByGrowth: totals.ByGrowth, TopByCalls: totals.ByCalls,
	TopByTemporary: totals.ByTemporary}

// subscribe turns the session's totals on. The events captured so far are
// in the trace file: the writer is flushed and, from that instant, the live
// events go to new totals while the file's are read into another (a
// seed) in the background, outside the sink's lock so the session goes on
// meanwhile, and outside ts.mu so that queries answer with the progress (a
// long session's file takes longer to read than a query may wait). The two
// are then merged, the frees of the live part matched against the seed's
// blocks. Sessions that write no file, or one that is not a plain sequence
// (circular, newfile), begin their totals empty at the first query. ts.mu
// is held.
func (s *Session) subscribe() error {
	ts := &s.top
	sk := s.sink
	sk.mu.Lock()
	if sk.keepAgg {
		// The session's own totals, kept since it started (export).
		sk.mu.Unlock()
		ts.gen++
		ts.on, ts.seeded, ts.reading = true, true, false
		ts.clients = map[string]*topClient{}
		go s.expireTop(topLease)
		return nil
	}
	var path string
	var size int64
	if sk.w != nil && !sk.closed && s.props.FileMode == Sequential {
		if err := sk.w.Flush(); err != nil {
			sk.mu.Unlock()
			return fmt.Errorf("top: flushing the trace file: %w", err)
		}
		sk.written.Store(sk.w.Written())
		path, size = sk.w.Files()[0], sk.w.Written()
	}
	live := totals.NewSampled(int64(s.props.Sample))
	live.KeepMisses(path != "")
	sk.agg = live
	sk.mu.Unlock()

	ts.gen++
	// A read-back of an expired subscription may still run: its
	// reading is not this one's.
	ts.on, ts.seeded, ts.reading = true, false, false
	ts.clients = map[string]*topClient{}
	if path != "" {
		ts.reading, ts.readSize, ts.readDone = true, size, make(chan struct{})
		ts.read = new(atomic.Int64)
		go s.readBack(ts.gen, ts.readDone, ts.read, live, path, size)
	}
	go s.expireTop(topLease)
	return nil
}

// readBack reads the first size bytes of the session's trace file into a
// seed and merges live, the totals of the events since, into it (see
// subscribe). If the read fails, the totals go on from live alone.
func (s *Session) readBack(gen int, done chan struct{}, read *atomic.Int64, live *totals.Totals, path string, size int64) {
	ts := &s.top
	seed := totals.NewSampled(int64(s.props.Sample))
	err := readSeed(seed, path, size, read)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	defer close(done)
	if ts.gen != gen || !ts.on {
		return // expired meanwhile
	}
	ts.reading = false
	sk := s.sink
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if err != nil {
		live.KeepMisses(false)
		return
	}
	seed.Merge(live)
	sk.agg = seed
	ts.seeded = true
}

// readSeed replays the first size bytes of the session's own trace file
// into a. The file is opened without following a symbolic link, and must
// be ours.
func readSeed(a *totals.Totals, path string, size int64, read *atomic.Int64) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d: %w", path, st.Uid, errs.ErrAccessDenied)
	}
	r, err := tracefile.NewReader(tracefile.CountReads(io.NewSectionReader(f, 0, size), func(n int64) { read.Add(n) }), size)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Replay(a, tracefile.Window{})
}

// expireTop drops the totals once no client has asked for topLease, or
// when the session ends (they stay readable in this process: an owner's
// last query sees the final state).
func (s *Session) expireTop(topLease time.Duration) {
	t := time.NewTicker(topLease / 6)
	defer t.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case <-t.C:
		}
		ts := &s.top
		ts.mu.Lock()
		if time.Since(ts.last) > topLease && !ts.fromStart {
			ts.on, ts.clients = false, nil
			s.sink.mu.Lock()
			if !s.sink.keepAgg {
				s.sink.agg = nil
			}
			s.sink.mu.Unlock()
			ts.mu.Unlock()
			return
		}
		for name, c := range ts.clients {
			if time.Since(c.seen) > topLease {
				delete(ts.clients, name)
			}
		}
		ts.mu.Unlock()
	}
}
