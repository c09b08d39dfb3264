package tracefile

import (
	"fmt"

	"github.com/heapscope/heapscope/event"
)

// Notes (event.Note) are stored two ways. A Warning is a definition (tag
// defWarning): few, needed by a reader of any window, and restated with
// the other definitions in circular and newfile modes. Memory samples,
// verdicts and censuses are timed records of the timeline (op opNote),
// whose fields are in the misc stream; verdicts and censuses, which list
// blocks, are stored in parts, as snapshots are.

// Note kinds, the first field of an opNote record.
const (
	noteMemory   = 1
	noteVerdict  = 2
	noteCensus   = 3
	noteResident = 4
)

// Note part flags (verdicts and censuses).
const (
	noteComplete = 1 << 0 // event.Verdict.Complete
	noteFirst    = 1 << 1
	noteLast     = 1 << 2
	noteGroups   = 1 << 3 // a census's blocks have groups (event.Census.BlockGroups)
	notePartial  = 1 << 4 // event.Verdict.Partial
	noteAtExit   = 1 << 5 // event.Verdict.AtExit
)

// maxGroups bounds a census's groups; maxGroupText the bytes of a group's
// strings.
const (
	maxGroups    = 1 << 20
	maxGroupText = 4096
)

// maxNoteEntries bounds the blocks of one verdict or census: a census of a
// large heap lists more blocks than a snapshot may hold.
const maxNoteEntries = 1 << 27

// notePartLen is the most blocks in one part of a verdict or census.
const notePartLen = 8192

func appendWarning(b []byte, w *event.Warning) []byte {
	b = append(b, defWarning)
	b = appendUvarint(b, uint64(w.PID))
	b = appendVarint(b, w.Time)
	b = appendString(b, w.Code)
	return appendString(b, w.Text)
}

// memoryFields lists a Memory's counters in their stored order; a reader
// ignores counters past the ones it knows and takes missing ones as 0.
func memoryFields(m *event.Memory) []*uint64 {
	return []*uint64{&m.RSS, &m.Anon, &m.File, &m.Shmem, &m.Swap}
}

// spaceFields does the same for a census's HeapSpace.
func spaceFields(s *event.HeapSpace) []*uint64 {
	return []*uint64{&s.Arenas, &s.InUse, &s.InUseBlocks, &s.Overhead, &s.FreeBins, &s.FreeFastbins, &s.FreeTcache,
		&s.Top, &s.Mmapped, &s.MmappedBlocks, &s.Trimmable, &s.Corrupt}
}

func appendFields(b []byte, fields []*uint64) []byte {
	b = appendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = appendUvarint(b, *f)
	}
	return b
}

// maxNoteFields bounds a record's count of counters.
const maxNoteFields = 64

func readFields(misc []byte, i int, fields []*uint64) int {
	n, i := uvarint(misc, i)
	if i < 0 || n > maxNoteFields {
		return -1
	}
	for k := uint64(0); k < n; k++ {
		var v uint64
		v, i = uvarint(misc, i)
		if k < uint64(len(fields)) {
			*fields[k] = v
		}
	}
	return i
}

func (e *timelineEncoder) memory(m *event.Memory) {
	e.time(m.Time)
	e.s[sOps] = append(e.s[sOps], opNote)
	b := appendUvarint(e.s[sMisc], noteMemory)
	b = appendUvarint(b, uint64(m.PID))
	e.s[sMisc] = appendFields(b, memoryFields(m))
}

// verdictPart stores blocks as one part of verdict v.
func (e *timelineEncoder) verdictPart(v *event.Verdict, flags byte, blocks []event.BlockClass) {
	e.time(v.Time)
	e.s[sOps] = append(e.s[sOps], opNote)
	if v.Complete {
		flags |= noteComplete
	}
	if v.Partial {
		flags |= notePartial
	}
	if v.AtExit {
		flags |= noteAtExit
	}
	b := appendUvarint(e.s[sMisc], noteVerdict)
	b = append(appendUvarint(b, uint64(v.PID)), flags)
	if flags&noteFirst != 0 {
		b = appendUvarint(b, uint64(v.Rules))
		b = appendUvarint(b, uint64(max(v.Pause, 0)))
		b = appendUvarint(b, uint64(max(v.Elapsed, 0)))
	}
	b = appendUvarint(b, uint64(len(blocks)))
	var prev uint64
	for _, c := range blocks {
		b = appendVarint(b, int64(c.Addr-prev))
		prev = c.Addr
		b = appendUvarint(b, uint64(c.Class))
	}
	e.s[sMisc] = b
}

// censusPart stores blocks as one part of census c, with their groups when
// groups is not empty.
func (e *timelineEncoder) censusPart(c *event.Census, flags byte, blocks []event.LiveBlock, groups []uint32) {
	e.time(c.Time)
	e.s[sOps] = append(e.s[sOps], opNote)
	b := appendUvarint(e.s[sMisc], noteCensus)
	if len(groups) > 0 {
		flags |= noteGroups
	}
	b = append(appendUvarint(b, uint64(c.PID)), flags)
	if flags&noteFirst != 0 {
		b = appendUvarint(b, uint64(c.Heap))
		b = appendUvarint(b, uint64(max(c.Pause, 0)))
		b = appendFields(b, spaceFields(&c.Space))
		if flags&noteGroups != 0 {
			b = appendUvarint(b, uint64(len(c.Groups)))
			for _, g := range c.Groups {
				b = appendUvarint(b, g.Lo)
				b = appendUvarint(b, g.Hi)
				b = appendString(b, clip(g.Name))
				b = appendUvarint(b, g.Example)
				b = appendString(b, clip(g.Text))
				b = appendString(b, clip(g.HeldBy))
				b = appendUvarint(b, g.Held)
			}
		}
	}
	b = appendUvarint(b, uint64(len(blocks)))
	var prev uint64
	for k, l := range blocks {
		b = appendVarint(b, int64(l.Addr-prev))
		prev = l.Addr
		b = appendUvarint(b, l.Size)
		if flags&noteGroups != 0 {
			b = appendUvarint(b, uint64(groups[k]))
		}
	}
	e.s[sMisc] = b
}

// clip bounds a string a census group stores.
func clip(s string) string {
	if len(s) > maxGroupText {
		return s[:maxGroupText]
	}
	return s
}

// residentFields lists a Resident's counters in their stored order.
func residentFields(r *event.Resident) []*uint64 {
	return []*uint64{&r.RSS, &r.PSS, &r.Swap, &r.Rollup, &r.Trimmable, &r.Disagreement}
}

// residentPartFields lists a part's counters in their stored order.
func residentPartFields(p *event.ResidentPart) []*uint64 {
	return []*uint64{&p.RSS, &p.PSS, &p.Bytes}
}

// Resident flags.
const (
	residentZeroPages = 1 << 0 // event.Resident.ZeroPagesKnown
	residentMeasured  = 1 << 0 // event.ResidentPart.Measured
)

func (e *timelineEncoder) resident(r *event.Resident) {
	e.time(r.Time)
	e.s[sOps] = append(e.s[sOps], opNote)
	b := appendUvarint(e.s[sMisc], noteResident)
	b = appendUvarint(b, uint64(r.PID))
	var flags byte
	if r.ZeroPagesKnown {
		flags |= residentZeroPages
	}
	b = appendFields(append(b, flags), residentFields(r))
	b = appendUvarint(b, uint64(len(r.Parts)))
	for i := range r.Parts {
		p := &r.Parts[i]
		b = appendString(b, clip(p.Name))
		b = appendString(b, clip(p.How))
		var pf byte
		if p.Measured {
			pf |= residentMeasured
		}
		b = appendFields(append(b, pf), residentPartFields(p))
	}
	e.s[sMisc] = b
}

// Note implements event.Sink.
func (w *Writer) Note(n event.Note) error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	switch n := n.(type) {
	case event.Warning:
		return w.def(n.PID, func(b []byte) []byte { return appendWarning(b, &n) })
	case event.Memory:
		w.tl.memory(&n)
		w.lastTime = max(w.lastTime, n.Time)
		return w.cutIfFull()
	case event.Verdict:
		if len(n.Blocks) > maxNoteEntries {
			return fmt.Errorf("tracefile: a verdict of %d blocks: the format holds at most %d", len(n.Blocks), maxNoteEntries)
		}
		return w.parts(len(n.Blocks), n.Time, func(flags byte, from, to int) {
			w.tl.verdictPart(&n, flags, n.Blocks[from:to])
		})
	case event.Census:
		if len(n.Blocks) > maxNoteEntries {
			return fmt.Errorf("tracefile: a census of %d blocks: the format holds at most %d", len(n.Blocks), maxNoteEntries)
		}
		if err := checkGroups(&n); err != nil {
			return err
		}
		return w.parts(len(n.Blocks), n.Time, func(flags byte, from, to int) {
			var groups []uint32
			if len(n.BlockGroups) > 0 {
				groups = n.BlockGroups[from:to]
			}
			w.tl.censusPart(&n, flags, n.Blocks[from:to], groups)
		})
	case event.Resident:
		if len(n.Parts) > maxNoteFields {
			return fmt.Errorf("tracefile: resident memory in %d parts: the format holds at most %d", len(n.Parts), maxNoteFields)
		}
		w.tl.resident(&n)
		w.lastTime = max(w.lastTime, n.Time)
		return w.cutIfFull()
	}
	return fmt.Errorf("tracefile: a note of type %T", n)
}

// checkGroups checks that a census's groups can be stored: one group per
// block, or none, each naming a group it has.
func checkGroups(c *event.Census) error {
	if len(c.BlockGroups) == 0 {
		return nil
	}
	if len(c.BlockGroups) != len(c.Blocks) {
		return fmt.Errorf("tracefile: a census of %d blocks with the groups of %d", len(c.Blocks), len(c.BlockGroups))
	}
	if len(c.Groups) > maxGroups {
		return fmt.Errorf("tracefile: a census of %d groups: the format holds at most %d", len(c.Groups), maxGroups)
	}
	for _, g := range c.BlockGroups {
		if int(g) >= len(c.Groups) {
			return fmt.Errorf("tracefile: a census block in group %d of %d", g, len(c.Groups))
		}
	}
	return nil
}

// parts stores a note of n blocks in parts of at most notePartLen, calling
// part for each with its flags and range.
func (w *Writer) parts(n int, t int64, part func(flags byte, from, to int)) error {
	flags := byte(noteFirst)
	for from := 0; ; {
		to := min(n, from+notePartLen)
		if to == n {
			flags |= noteLast
		}
		part(flags, from, to)
		from, flags = to, 0
		if err := w.cutIfFull(); err != nil {
			return err
		}
		if from == n || w.stopped {
			break
		}
	}
	w.lastTime = max(w.lastTime, t)
	return nil
}

// decodeWarning decodes a warning definition at raw[i:] (after its tag).
func decodeWarning(raw []byte, i int) (event.Warning, int) {
	var w event.Warning
	pid, i := uvarint(raw, i)
	w.Time, i = varint(raw, i)
	w.Code, i = stringAt(raw, i)
	w.Text, i = stringAt(raw, i)
	if i < 0 || pid > 1<<32-1 {
		return w, -1
	}
	w.PID = uint32(pid)
	return w, i
}

// noteBuilder joins the parts of a verdict or census, which may span
// chunks.
type noteBuilder struct {
	kind    uint64 // of the note being joined; 0: none
	pid     uint32
	time    int64
	keep    bool // in the window
	verdict event.Verdict
	census  event.Census
	dropped int // parts whose first part was missing
}

// note decodes the note record at misc[i:], of time t, and returns the
// note when it is complete (nil otherwise) and the index after it.
func (b *noteBuilder) note(misc []byte, i int, t int64, keep bool) (event.Note, int, error) {
	kind, i := uvarint(misc, i)
	pid, i := uvarint(misc, i)
	if i < 0 || pid > 1<<32-1 {
		return nil, -1, fmt.Errorf("a note's kind and pid")
	}
	if kind == noteMemory {
		m := event.Memory{PID: uint32(pid), Time: t}
		if i = readFields(misc, i, memoryFields(&m)); i < 0 {
			return nil, -1, fmt.Errorf("a memory sample's counters")
		}
		if !keep {
			return nil, i, nil
		}
		return m, i, nil
	}
	if kind == noteResident {
		r, i, err := decodeResident(misc, i)
		if err != nil || !keep {
			return nil, i, err
		}
		r.PID, r.Time = uint32(pid), t
		return r, i, nil
	}
	if kind != noteVerdict && kind != noteCensus {
		return nil, -1, fmt.Errorf("a note kind 1-4 (got %d)", kind)
	}
	if i >= len(misc) {
		return nil, -1, fmt.Errorf("a note part's flags")
	}
	flags := misc[i]
	i++
	first := flags&noteFirst != 0
	switch {
	case first:
		b.kind, b.pid, b.time, b.keep = kind, uint32(pid), t, keep
		b.verdict, b.census = event.Verdict{}, event.Census{}
	case b.kind != kind || b.pid != uint32(pid) || b.time != t:
		// A continuation whose start is gone: decode it and drop it.
		b.kind = 0
		b.dropped++
	}
	collect := b.kind != 0 && b.keep
	var err error
	if kind == noteVerdict {
		i, err = b.verdictPart(misc, i, flags, collect)
	} else {
		i, err = b.censusPart(misc, i, flags, collect)
	}
	if err != nil || flags&noteLast == 0 || b.kind == 0 {
		return nil, i, err
	}
	b.kind = 0
	if !b.keep {
		return nil, i, nil
	}
	if kind == noteVerdict {
		b.verdict.PID, b.verdict.Time = b.pid, b.time
		return b.verdict, i, nil
	}
	b.census.PID, b.census.Time = b.pid, b.time
	return b.census, i, nil
}

func (b *noteBuilder) verdictPart(misc []byte, i int, flags byte, collect bool) (int, error) {
	v := &b.verdict
	if flags&noteFirst != 0 {
		var rules, pause, elapsed uint64
		rules, i = uvarint(misc, i)
		pause, i = uvarint(misc, i)
		elapsed, i = uvarint(misc, i)
		if i < 0 || rules > 255 || pause > 1<<63-1 || elapsed > 1<<63-1 {
			return -1, fmt.Errorf("a verdict's rules, pause and time")
		}
		v.Rules, v.Pause, v.Elapsed = event.Rules(rules), int64(pause), int64(elapsed)
		v.Complete = flags&noteComplete != 0
		v.Partial = flags&notePartial != 0
		v.AtExit = flags&noteAtExit != 0
	}
	n, i := uvarint(misc, i)
	// Every block takes at least 2 bytes.
	if i < 0 || n > uint64(len(misc)-i)/2 || uint64(len(v.Blocks))+n > maxNoteEntries {
		return -1, fmt.Errorf("a count of classified blocks the stream can hold")
	}
	if collect {
		v.Blocks = growTo(v.Blocks, int(n))
	}
	var prev uint64
	for ; n > 0; n-- {
		var d int64
		var c uint64
		d, i = varint(misc, i)
		c, i = uvarint(misc, i)
		if i < 0 || !event.Class(min(c, 255)).Valid() {
			return -1, fmt.Errorf("a classified block (address, class)")
		}
		prev += uint64(d)
		if collect {
			v.Blocks = append(v.Blocks, event.BlockClass{Addr: prev, Class: event.Class(c)})
		}
	}
	return i, nil
}

func (b *noteBuilder) censusPart(misc []byte, i int, flags byte, collect bool) (int, error) {
	c := &b.census
	if flags&noteFirst != 0 {
		var heap, pause uint64
		heap, i = uvarint(misc, i)
		pause, i = uvarint(misc, i)
		if i < 0 || heap > 1<<16-1 || pause > 1<<63-1 {
			return -1, fmt.Errorf("a census's heap and pause")
		}
		c.Heap, c.Pause = event.Heap(heap), int64(pause)
		if i = readFields(misc, i, spaceFields(&c.Space)); i < 0 {
			return -1, fmt.Errorf("a census's counters")
		}
		if flags&noteGroups != 0 {
			var err error
			if i, err = b.censusGroups(misc, i); err != nil {
				return -1, err
			}
		}
	}
	grouped := flags&noteGroups != 0
	// A part whose first part is gone is decoded and dropped: its groups
	// are not known.
	joined := b.kind != 0
	if joined && (grouped != (len(c.Groups) > 0) || grouped && len(c.BlockGroups) != len(c.Blocks)) {
		return -1, fmt.Errorf("census parts that agree on the blocks' groups")
	}
	n, i := uvarint(misc, i)
	if i < 0 || n > uint64(len(misc)-i)/2 || uint64(len(c.Blocks))+n > maxNoteEntries {
		return -1, fmt.Errorf("a count of census blocks the stream can hold")
	}
	if collect {
		c.Blocks = growTo(c.Blocks, int(n))
		if grouped {
			c.BlockGroups = growTo(c.BlockGroups, int(n))
		}
	}
	var prev uint64
	for ; n > 0; n-- {
		var d int64
		var size, g uint64
		d, i = varint(misc, i)
		size, i = uvarint(misc, i)
		if grouped {
			g, i = uvarint(misc, i)
			if i >= 0 && joined && g >= uint64(len(c.Groups)) {
				return -1, fmt.Errorf("a census block's group (%d of %d)", g, len(c.Groups))
			}
		}
		if i < 0 {
			return -1, fmt.Errorf("a census block (address, size)")
		}
		prev += uint64(d)
		if collect {
			c.Blocks = append(c.Blocks, event.LiveBlock{Addr: prev, Size: size})
			if grouped {
				c.BlockGroups = append(c.BlockGroups, uint32(g))
			}
		}
	}
	return i, nil
}

// censusGroups decodes a census's groups at misc[i:]. They are kept even
// when the blocks are not collected, to check the blocks' group indices.
func (b *noteBuilder) censusGroups(misc []byte, i int) (int, error) {
	c := &b.census
	n, i := uvarint(misc, i)
	// Every group takes at least 7 bytes.
	if i < 0 || n == 0 || n > maxGroups || n > uint64(len(misc)-i)/7 {
		return -1, fmt.Errorf("a count of census groups the stream can hold")
	}
	c.Groups = make([]event.CensusGroup, 0, n)
	for ; n > 0; n-- {
		var g event.CensusGroup
		g.Lo, i = uvarint(misc, i)
		g.Hi, i = uvarint(misc, i)
		g.Name, i = stringAt(misc, i)
		g.Example, i = uvarint(misc, i)
		g.Text, i = stringAt(misc, i)
		g.HeldBy, i = stringAt(misc, i)
		g.Held, i = uvarint(misc, i)
		if i < 0 {
			return -1, fmt.Errorf("a census group")
		}
		c.Groups = append(c.Groups, g)
	}
	return i, nil
}

// decodeResident decodes a resident memory note at misc[i:] (after its
// kind and pid).
func decodeResident(misc []byte, i int) (event.Resident, int, error) {
	var r event.Resident
	if i < 0 || i >= len(misc) {
		return r, -1, fmt.Errorf("resident memory's flags")
	}
	r.ZeroPagesKnown = misc[i]&residentZeroPages != 0
	if i = readFields(misc, i+1, residentFields(&r)); i < 0 {
		return r, -1, fmt.Errorf("resident memory's counters")
	}
	n, i := uvarint(misc, i)
	// Every part takes at least 4 bytes.
	if i < 0 || n > maxNoteFields || n > uint64(len(misc)-i)/4 {
		return r, -1, fmt.Errorf("a count of resident memory's parts")
	}
	r.Parts = make([]event.ResidentPart, n)
	for k := range r.Parts {
		p := &r.Parts[k]
		p.Name, i = stringAt(misc, i)
		p.How, i = stringAt(misc, i)
		if i < 0 || i >= len(misc) {
			return r, -1, fmt.Errorf("a part of resident memory")
		}
		p.Measured = misc[i]&residentMeasured != 0
		if i = readFields(misc, i+1, residentPartFields(p)); i < 0 {
			return r, -1, fmt.Errorf("a part of resident memory's counters")
		}
	}
	if len(r.Parts) == 0 {
		r.Parts = nil
	}
	return r, i, nil
}

// growTo makes room for n more elements in s.
func growTo[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	out := make([]T, len(s), len(s)+n)
	copy(out, s)
	return out
}
