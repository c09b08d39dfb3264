package analyze

import (
	"math"
	"sort"

	"github.com/heapscope/heapscope/event"
)

// PreTrace is the stack of the blocks a census found live that the trace
// had not seen allocated: allocated before the trace (before an attach),
// with no stack. Their Stack in a Profile has ID PreTrace and no frames;
// its Counters have no allocations and no bytes allocated (none were seen),
// only what was freed of them and what is live.
const PreTrace event.StackID = math.MaxUint32

// Rundown is what a census (event.Census) told the model of one process's
// heap: the blocks live at its time. At the census the model keeps the
// blocks the trace had seen allocated and still live (with their stacks),
// adds the others as allocated before the trace (stack PreTrace), and
// takes out the live blocks the census did not find (their frees were
// lost). The frees before the census of blocks the trace had not seen
// (allocated before the attach, freed between the attach and the census)
// were unmatched when they came: they are counted here instead.
type Rundown struct {
	PID   uint32
	Time  int64
	Heap  event.Heap
	Pause int64 // ns the process was stopped for the census
	Space event.HeapSpace
	// Blocks and Bytes are the census's blocks the trace had not seen
	// allocated: the live heap allocated before the trace. Traced counts
	// the census's blocks it had seen (allocated since the attach).
	Blocks, Bytes uint64
	Traced        uint64
	// Missed counts the blocks the trace had live at the census that the
	// census did not find: their frees were lost (counted in MissedFrees).
	Missed uint64
	// FreedBefore counts the frees, between the attach and the census, of
	// blocks the trace had not seen: allocated before the attach, not
	// unmatched frees.
	FreedBefore uint64
	// Overtaken counts the allocations the trace saw, after the census,
	// at the address of one of Blocks still live: the census saw the
	// allocation before its event did (or the block's free was lost).
	// The block gives way to the traced one, not counted a missed free.
	Overtaken uint64
	// LiveBlocks and LiveBytes are what is left of Blocks at the end of
	// the window, or at the process's exit: its blocks from before the
	// trace then leave the heap, as all its blocks do, and stay what it
	// did not free (see Model.Exit).
	LiveBlocks, LiveBytes uint64
	// Groups say what the blocks allocated before the trace are (see
	// event.CensusGroup), largest at the census first; one group with no
	// name when the census gave none.
	Groups []RundownGroup
}

// RundownGroup is one kind of block of a Rundown: how many of the blocks
// allocated before the trace it had at the census, and how many are left
// at the end of the window.
type RundownGroup struct {
	event.CensusGroup
	Blocks, Bytes         uint64
	LiveBlocks, LiveBytes uint64
}

// rundownState is the model's record of censuses.
type rundownState struct {
	rundowns []*Rundown
	// groups are every rundown's groups; a block allocated before the
	// trace keeps the index of its group where a block keeps its thread
	// (block.tid's low groupBits bits: the thread IDs' room).
	groups []rundownGroup
	sites  map[int32]bool // the PreTrace sites
	// resident holds the processes' resident memory explained, in the
	// window.
	resident []event.Resident
}

type rundownGroup struct {
	g   *RundownGroup
	run *Rundown
}

// groupBits bound a rundown group's index kept in block.tid: the bits a
// thread ID takes there, below anything else a block may keep in it.
const groupBits = 22

// group returns the index of the rundown group of a block of a PreTrace
// site.
func (b block) group() int { return int(b.tid & (1<<groupBits - 1)) }

// released counts the end of block b of a PreTrace site.
func (r *rundownState) released(b block) {
	if !r.sites[b.site] || b.group() >= len(r.groups) {
		return
	}
	g := r.groups[b.group()]
	g.g.LiveBlocks--
	g.g.LiveBytes -= b.size
	g.run.LiveBlocks--
	g.run.LiveBytes -= b.size
}

// overtaken counts a new allocation at the address of block b of a
// PreTrace site, and reports whether b was one.
func (r *rundownState) overtaken(b block) bool {
	if !r.sites[b.site] || b.group() >= len(r.groups) {
		return false
	}
	r.groups[b.group()].run.Overtaken++
	return true
}

// census applies a census of a process's heap (see Rundown). A census
// outside the window is ignored, as allocations outside it are; so is one
// in a sampled trace, whose frees of blocks not sampled are not recorded.
func (m *Model) census(c *event.Census) {
	if c.Time < m.from || c.Time >= m.to || m.rate > 0 {
		return
	}
	m.seen(c.Time)
	p := m.proc(c.PID)
	si := m.siteOf(p, PreTrace)
	if m.rundown.sites == nil {
		m.rundown.sites = map[int32]bool{}
	}
	m.rundown.sites[si] = true
	r := &Rundown{PID: c.PID, Time: c.Time, Heap: c.Heap, Pause: c.Pause, Space: c.Space}
	m.rundown.rundowns = append(m.rundown.rundowns, r)

	groups := c.Groups
	grouped := len(c.BlockGroups) == len(c.Blocks) && len(groups) > 0
	if !grouped {
		groups = []event.CensusGroup{{}}
	}
	base := len(m.rundown.groups)
	if base+len(groups) > 1<<groupBits {
		// More groups than a block can name (4 M, in all the censuses of
		// the trace): the census's blocks go in one.
		groups, grouped = []event.CensusGroup{{}}, false
	}
	r.Groups = make([]RundownGroup, len(groups))
	for i := range groups {
		r.Groups[i].CensusGroup = groups[i]
		m.rundown.groups = append(m.rundown.groups, rundownGroup{&r.Groups[i], r})
	}

	// The census's addresses, sorted, to find the live blocks it lacks.
	addrs := make([]uint64, len(c.Blocks))
	for i, b := range c.Blocks {
		addrs[i] = b.Addr
	}
	if !sort.SliceIsSorted(addrs, func(i, j int) bool { return addrs[i] < addrs[j] }) {
		sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	}
	in := func(a uint64) bool {
		i := sort.Search(len(addrs), func(i int) bool { return addrs[i] >= a })
		return i < len(addrs) && addrs[i] == a
	}
	for _, a := range m.liveAddrs(p) {
		if !in(a) {
			b, _ := m.blocks.take(p, a)
			m.replaced(b) // its free was lost
			r.Missed++
		}
	}

	s := &m.sites[si]
	for i, b := range c.Blocks {
		if _, ok := m.blocks.lookup(p, b.Addr); ok {
			r.Traced++ // allocated since the attach: it keeps its stack
			continue
		}
		g := 0
		if grouped && int(c.BlockGroups[i]) < len(groups) {
			g = int(c.BlockGroups[i])
		}
		m.blocks.put(p, b.Addr, block{size: b.Size, site: si, tid: uint32(base + g)})
		m.touch(s)
		s.liveBytes += b.Size
		s.liveBlocks++
		m.liveBytes += b.Size
		m.liveBlocks++
		r.Blocks++
		r.Bytes += b.Size
		rg := &r.Groups[g]
		rg.Blocks++
		rg.Bytes += b.Size
	}
	for i := range r.Groups {
		r.Groups[i].LiveBlocks, r.Groups[i].LiveBytes = r.Groups[i].Blocks, r.Groups[i].Bytes
	}
	r.LiveBlocks, r.LiveBytes = r.Blocks, r.Bytes

	// The frees before it of blocks it did not know were of blocks
	// allocated before the attach.
	r.FreedBefore = p.unmatched
	m.unmatched -= min(m.unmatched, p.unmatched)
	p.unmatched = 0

	m.timeline.add(c.Time, m.liveBytes, m.liveBlocks)
	m.peaked(c.Time)
}

// liveAddrs returns the addresses of p's live blocks.
func (m *Model) liveAddrs(p *proc) []uint64 {
	var out []uint64
	if p.key != 0 {
		for k := range m.blocks.packed.All() {
			if k&^(1<<addrBits-1) == p.key {
				out = append(out, k&(1<<addrBits-1))
			}
		}
	}
	for k := range m.blocks.wide {
		if k.pid == p.pid && k.gen == p.gen { // not the blocks an exit left
			out = append(out, k.addr)
		}
	}
	return out
}

// rundownProfile adds the censuses' rundowns and resident memory to pr.
func (m *Model) rundownProfile(pr *Profile) {
	for _, r := range m.rundown.rundowns {
		c := *r
		c.Groups = append([]RundownGroup(nil), r.Groups...)
		sort.SliceStable(c.Groups, func(i, j int) bool { return c.Groups[i].Bytes > c.Groups[j].Bytes })
		pr.Rundowns = append(pr.Rundowns, c)
	}
	pr.Resident = append([]event.Resident(nil), m.rundown.resident...)
}

// lookup returns the block at addr.
func (t *blockTable) lookup(p *proc, addr uint64) (block, bool) {
	if packable(p, addr) {
		return t.packed.Get(p.key | addr)
	}
	b, ok := t.wide[wideKey{p.pid, p.gen, addr}]
	return b, ok
}
