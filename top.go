package heapscope

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
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
	Seeded    bool           `json:"seeded"`
	Aggregate bool           `json:"aggregate,omitempty"` // some process is counted by eBPF's aggregate snapshots: no temporaries, no threads
	Totals    TopSite        `json:"totals"`              // of the processes and threads selected; Frames nil
	Unmatched uint64         `json:"unmatched"`           // frees of blocks never seen allocated
	Processes []TopProcess   `json:"processes"`
	Sites     []TopSite      `json:"sites"`
	Modules   []event.Module `json:"modules,omitempty"` // the module records from TopQuery.Modules on
	NModules  int            `json:"n_modules"`         // module records in all
	Stats     event.Stats    `json:"stats"`
	Ended     bool           `json:"ended,omitempty"` // the session has ended: this is its last state
	// SampleRate is the session's sampling rate (Properties.Sample), 0
	// when exact: the totals count the sampled allocations as they are,
	// not scaled up to estimates.
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
	Exe     string   `json:"exe,omitempty"`
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
}

// Top returns the sites of the live session named name, which may run in
// any process (the control operation "top"). The session keeps the totals
// only while some client asks: its first query turns them on (reading back
// what the session's trace file holds so far), and they are dropped when no
// client has asked for a while (topLease).
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
	mu      sync.Mutex // held by a query
	on      bool
	gen     int // subscriptions so far: a read-back of an expired one is dropped
	seeded  bool
	clients map[string]*topClient
	last    time.Time
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
	time int64
	live []uint64  // by site index
	seen time.Time // its last query: clients gone for topLease are dropped
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
	a := sk.agg
	// A growth is measured between the times of the latest events of two
	// answers: before the first event there is no time to measure from
	// (the wall clock would count what a provider delivers late, as
	// eBPF's first events after an attach, as made since).
	now := a.lastTime
	r := TopResult{Time: now, Seeded: ts.seeded, Unmatched: a.unmatched, Processes: a.processes(),
		NModules: len(a.modules), Stats: stats, Ended: sk.closed, SampleRate: int64(s.props.Sample)}
	if q.Modules >= 0 && q.Modules < len(a.modules) {
		r.Modules = append([]event.Module(nil), a.modules[q.Modules:]...)
	}
	sites := make([]aggSite, 0, len(a.sites))
	idx := make([]int, 0, len(a.sites))
	// Every site's live bytes, for the client's next growth whatever it
	// shows next.
	live := make([]uint64, len(a.sites))
	all := append([]aggSite(nil), a.sites...)
	a.held(func(si int32, size uint64) {
		all[si].liveBytes += size
		all[si].liveBlocks++
	})
	for i := range all {
		st := &all[i]
		live[i] = st.liveBytes
		if q.PID != 0 && st.pid != q.PID || q.TID != 0 && st.tid != q.TID {
			continue
		}
		sites = append(sites, *st)
		idx = append(idx, i)
	}
	for _, p := range a.procList {
		if p.snap {
			r.Aggregate = true
		}
	}
	frames := map[[2]uint64][]uint64{}
	for _, st := range sites {
		k := [2]uint64{uint64(st.pid), uint64(st.stack)}
		if _, ok := frames[k]; !ok {
			if p := a.procs[st.pid]; p != nil {
				frames[k] = p.frames[st.stack]
			}
		}
	}
	sk.mu.Unlock()

	advance := c.time == 0 || now-c.time >= max(q.MinElapsed, 1)
	if c.time != 0 && advance {
		r.Elapsed = now - c.time
	}
	prev := c.live
	if advance {
		c.live = live
	}
	// Rows: by stack per process, threads summed, unless one thread is asked.
	type rowKey struct {
		pid, tid uint32
		stack    event.StackID
	}
	rows := map[rowKey]*TopSite{}
	var list []*TopSite
	for i := range sites {
		st := &sites[i]
		k := rowKey{st.pid, st.tid, st.stack}
		if q.TID == 0 {
			k.tid = 0
		}
		row := rows[k]
		if row == nil {
			row = &TopSite{PID: st.pid, TID: k.tid, Frames: frames[[2]uint64{uint64(st.pid), uint64(st.stack)}]}
			rows[k] = row
			list = append(list, row)
		}
		row.LiveBytes += st.liveBytes
		row.LiveBlocks += st.liveBlocks
		row.Allocs += st.allocs
		row.AllocBytes += st.allocBytes
		row.Frees += st.frees
		row.Temporary += st.temporary
		si := idx[i]
		if r.Elapsed > 0 {
			old := uint64(0)
			if si < len(prev) {
				old = prev[si]
			}
			row.Growth += int64(st.liveBytes) - int64(old)
		}
	}
	if advance {
		c.time = now
	}
	for _, row := range list {
		t := &r.Totals
		t.LiveBytes += row.LiveBytes
		t.LiveBlocks += row.LiveBlocks
		t.Allocs += row.Allocs
		t.AllocBytes += row.AllocBytes
		t.Frees += row.Frees
		t.Temporary += row.Temporary
		t.Growth += row.Growth
	}
	key := func(t *TopSite) int64 {
		switch q.Order {
		case TopByGrowth:
			return t.Growth
		case TopByCalls:
			return int64(t.Allocs)
		case TopByTemporary:
			return int64(t.Temporary)
		}
		return int64(t.LiveBytes)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := key(list[i]), key(list[j])
		if a != b {
			return a > b
		}
		if list[i].LiveBytes != list[j].LiveBytes {
			return list[i].LiveBytes > list[j].LiveBytes
		}
		return list[i].Allocs > list[j].Allocs
	})
	for _, row := range list[:min(q.N, len(list))] {
		r.Sites = append(r.Sites, *row)
	}
	return r, nil
}

// subscribe turns the session's totals on. The events captured so far are
// in the trace file: the writer is flushed and, from that instant, the live
// events go to a new aggregate while the file's are read into another (a
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
	live := newAggregate()
	live.keepMisses = path != ""
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
// seed and merges live, the aggregate of the events since, into it (see
// subscribe). If the read fails, the totals go on from live alone.
func (s *Session) readBack(gen int, done chan struct{}, read *atomic.Int64, live *aggregate, path string, size int64) {
	ts := &s.top
	seed := newAggregate()
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
		live.keepMisses, live.misses = false, nil
		return
	}
	seed.merge(live)
	sk.agg = seed
	ts.seeded = true
}

// readSeed replays the first size bytes of the session's own trace file
// into a. The file is opened without following a symbolic link, and must
// be ours.
func readSeed(a *aggregate, path string, size int64, read *atomic.Int64) error {
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
		if time.Since(ts.last) > topLease {
			ts.on, ts.clients = false, nil
			s.sink.mu.Lock()
			s.sink.agg = nil
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
