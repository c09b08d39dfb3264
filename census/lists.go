package census

import (
	"encoding/binary"
	"fmt"

	"github.com/heapscope/heapscope/internal/proc"
)

// listed is what the free lists say of chunks: which list each is on.
type listed struct {
	budget  int              // list steps left: no more than the heap has chunks, in all
	marks   []State          // by chunk index: the list a chunk of the walk is on
	extra   map[uint64]State // list nodes that are no chunk of the walk, by address
	twice   map[uint64]bool  // chunks on more than one list
	tcaches []ThreadCache
	tcache  map[uint64]int // tcache_perthread_struct blocks, by chunk address: the thread's TID
}

// put records that chunk addr (index ci when the walk found it, ok) is on a
// list of state s. It reports false when the chunk was already on one: the
// list loops, or two lists share the chunk (a double free), and the walk of
// this one stops there.
func (l *listed) put(ci int, ok bool, addr uint64, s State) bool {
	if ok {
		if l.marks[ci] != 0 {
			l.twice[addr] = true
			return false
		}
		l.marks[ci] = s
		return true
	}
	if _, dup := l.extra[addr]; dup {
		l.twice[addr] = true
		return false
	}
	l.extra[addr] = s
	return true
}

// known returns the addresses of the chunks the lists name, in no order.
func (l *listed) known(c *Census) []uint64 {
	var ks []uint64
	for i, m := range l.marks {
		if m != 0 {
			ks = append(ks, c.Chunks[i].Addr)
		}
	}
	for addr := range l.extra {
		ks = append(ks, addr)
	}
	return ks
}

// lists walks every free list: each arena's fastbins and bins, each
// thread's tcache. report says whether what is wrong with them becomes a
// problem (only the last walk's does, after resume).
func (w *walker) lists(report bool) *listed {
	l := &listed{marks: make([]State, len(w.c.Chunks)), extra: map[uint64]State{}, twice: map[uint64]bool{},
		tcache: map[uint64]int{}, budget: len(w.c.Chunks) + 1<<12}
	problem := func(addr uint64, format string, args ...any) {
		if report {
			w.c.problem(addr, 0, format, args...)
		}
	}
	step := func(p uint64) bool {
		if l.budget--; l.budget == 0 {
			problem(p, "the free lists name more chunks than the heap has: the rest of them are not walked")
		}
		return l.budget > 0
	}
	limit := len(w.c.Chunks) + 1 // no list is longer than the chunks
	lay := w.lay
	for ai, a := range w.c.Arenas {
		st := w.structs[ai]
		for i := int64(0); i < lay.state.fastbins.n; i++ {
			want := uint64(i+2) * align // fastbin_index(sz) = sz/16 - 2
			p := elem(st, lay.state.fastbins, i)
			for n := 0; p != 0; n++ {
				if n == limit {
					problem(p, "fastbin %d of arena %d is longer than the heap has chunks (a loop)", i, ai)
					break
				}
				if !step(p) {
					break
				}
				ci, ok := w.chunkAt(p)
				if !ok && !w.mem.readable(p, 4*sizeSz) {
					problem(p, "fastbin %d of arena %d points at %#x, no chunk", i, ai, p)
					break
				}
				if ok && w.c.Chunks[ci].Size != want {
					problem(p, "a chunk of %d bytes in fastbin %d (of %d-byte chunks)", w.c.Chunks[ci].Size, i, want)
				}
				if !l.put(ci, ok, p, Fastbin) {
					break
				}
				first, err := w.firstWord(ci, ok, p)
				if err != nil {
					problem(p, "fastbin %d of arena %d: chunk %#x, not one the walk found, cannot be read: %v", i, ai, p, err)
					break
				}
				p = first ^ ((p + 2*sizeSz) >> 12) // REVEAL_PTR
			}
		}
		for i := int64(1); i < lay.state.bins.n/2+1; i++ {
			// bin_at(a, i): a fake chunk whose fd and bk are bins[2(i-1)]
			// and bins[2(i-1)+1].
			head := a.Addr + uint64(lay.state.bins.off) + uint64(i-1)*2*sizeSz - 2*sizeSz
			p, back := elem(st, lay.state.bins, 2*(i-1)), head
			for n := 0; p != head; n++ {
				if n == limit {
					problem(p, "bin %d of arena %d is longer than the heap has chunks (a loop)", i, ai)
					break
				}
				if !step(p) {
					break
				}
				ci, ok := w.chunkAt(p)
				if !ok && !w.mem.readable(p, 4*sizeSz) {
					problem(p, "bin %d of arena %d points at %#x, no chunk", i, ai, p)
					break
				}
				fd, bk, err := w.words(ci, ok, p)
				if err != nil {
					problem(p, "bin %d of arena %d: chunk %#x, not one the walk found, cannot be read: %v", i, ai, p, err)
					break
				}
				if bk != back {
					problem(p, "bin %d of arena %d: this chunk's bk is %#x, not the chunk before it in the list (%#x)", i, ai, bk, back)
				}
				if !l.put(ci, ok, p, Free) {
					break
				}
				back, p = p, fd
			}
		}
	}
	w.tcaches(l, problem, step)
	return l
}

// threadRead is what Read reads of a thread: its tcache and its thread
// vector.
type threadRead struct {
	tid       int
	at        uint64 // the tcache variable's address
	tcache    uint64 // its value
	err       error  // why it or the tcache could not be read
	perthread []byte // the tcache_perthread_struct
	dtv       uint64 // tcbhead_t's dtv, 0 if not read
}

// readThreads reads each thread's tcache: the tcache variable is at the
// thread's pointer minus libc's TLS offset plus the variable's offset in
// libc's TLS block. It also reads the thread's DTV pointer and tcache_key.
func (w *walker) readThreads(threads []Thread, tls uint64) {
	if w.l.tcacheKey != 0 {
		w.key, _ = w.mem.u64(w.l.tcacheKey)
	}
	for _, t := range threads {
		r := threadRead{tid: t.TID, at: t.FSBase - tls + w.l.tcacheOff}
		if dtv, err := w.mem.u64(t.FSBase + uint64(w.lay.tcb.dtv.off)); err == nil {
			r.dtv = dtv
		}
		r.tcache, r.err = w.mem.u64(r.at)
		if r.err == nil && r.tcache != 0 {
			r.perthread, r.err = w.mem.block(r.tcache, uint64(w.lay.tcache.size))
		}
		w.threads = append(w.threads, r)
	}
}

// tcaches walks each thread's tcache, whose entries are blocks linked
// through their first word, safe-linked (stored ^ (address >> 12)).
func (w *walker) tcaches(l *listed, problem func(uint64, string, ...any), step func(uint64) bool) {
	lay := w.lay
	key := w.key
	limit := len(w.c.Chunks) + 1
	for _, t := range w.threads {
		tc := ThreadCache{TID: t.tid, Tcache: t.tcache}
		switch {
		case t.err != nil && t.tcache == 0:
			problem(t.at, "thread %d: its tcache pointer cannot be read: %v", t.tid, t.err)
			l.tcaches = append(l.tcaches, tc)
			continue
		case t.tcache == 0:
			l.tcaches = append(l.tcaches, tc) // the thread has not called malloc
			continue
		case t.err != nil:
			problem(t.tcache, "thread %d: its tcache cannot be read: %v", t.tid, t.err)
			l.tcaches = append(l.tcaches, tc)
			continue
		}
		ptr, st := t.tcache, t.perthread
		l.tcache[ptr-2*sizeSz] = t.tid
		for i := int64(0); i < lay.tcache.entries.n; i++ {
			count := elem(st, lay.tcache.counts, i)
			want := uint64(i)*align + minSize // tidx2usize, as a chunk size
			e := elem(st, lay.tcache.entries, i)
			n := uint64(0)
			for ; e != 0; n++ {
				if n >= count || int(n) >= limit {
					problem(e, "thread %d: tcache bin %d has more entries than its count (%d)", t.tid, i, count)
					break
				}
				if !step(e) {
					break
				}
				p := e - 2*sizeSz
				ci, ok := w.chunkAt(p)
				if !ok && (e%align != 0 || !w.mem.readable(p, 4*sizeSz)) {
					problem(e, "thread %d: tcache bin %d points at %#x, no block", t.tid, i, e)
					break
				}
				if ok && w.c.Chunks[ci].Size != want {
					problem(p, "thread %d: a chunk of %d bytes in tcache bin %d (of %d-byte chunks)", t.tid, w.c.Chunks[ci].Size, i, want)
				}
				first, second, err := w.words(ci, ok, p)
				if err != nil {
					problem(e, "thread %d: tcache bin %d: block %#x, not one the walk found, cannot be read: %v", t.tid, i, e, err)
					break
				}
				if key != 0 && second != key {
					problem(p, "thread %d: a block in tcache bin %d without tcache_key", t.tid, i)
				}
				if !l.put(ci, ok, p, Tcache) {
					break
				}
				tc.Chunks++
				e = first ^ (e >> 12) // REVEAL_PTR(&e->next)
			}
			if e == 0 && n < count {
				problem(ptr, "thread %d: tcache bin %d has %d entries, its count says %d", t.tid, i, n, count)
			}
		}
		l.tcaches = append(l.tcaches, tc)
	}
}

// states gives each chunk of an arena its state: what the walk read
// (PREV_INUSE of the next header), then what the free lists say; where the
// two disagree, the lists win and the census says so.
func (w *walker) states(l *listed) {
	c := w.c
	for i := range c.Chunks {
		ch := &c.Chunks[i]
		s := l.marks[i]
		listed := s != 0
		if ch.Arena < 0 || ch.State == Top || ch.State == Fencepost {
			if listed {
				c.problem(ch.Addr, 0, "the %s chunk is on a free list", ch.State)
			}
			continue
		}
		if l.twice[ch.Addr] {
			c.problem(ch.Addr, 0, "this chunk is on more than one free list (a double free)")
		}
		switch {
		case ch.State == Unknown:
			// The next header is corrupted: the list is all there is.
		case !listed && ch.State == Free:
			c.problem(ch.Addr, 0, "a free chunk (the next chunk's PREV_INUSE is clear) on no bin")
		case listed && s == Free && ch.State != Free:
			c.problem(ch.Addr, 0, "a chunk in a bin that the next chunk says is %s", ch.State)
		case listed && s != Free && ch.State != InUse:
			c.problem(ch.Addr, 0, "a chunk in a %s that the next chunk says is %s", s, ch.State)
		}
		if listed {
			ch.State = s
		}
	}
	c.Threads = l.tcaches
	for addr, tid := range l.tcache {
		if i, ok := c.Find(addr); ok && c.Chunks[i].State == InUse {
			c.Internal[addr] = fmt.Sprintf("glibc: tcache of thread %d", tid)
		} else {
			c.problem(addr, 0, "thread %d's tcache is not a block in use", tid)
		}
	}
}

// internal names the thread vectors (DTV) libc allocated for the threads
// it created: tcbhead_t's dtv points one dtv_t (16 bytes) into a block.
func (w *walker) internal() {
	for _, t := range w.threads {
		if t.dtv < 4*sizeSz {
			continue
		}
		if i, ok := w.c.Find(t.dtv - 2*align); ok && w.c.Chunks[i].State.Allocated() {
			w.c.Internal[w.c.Chunks[i].Addr] = fmt.Sprintf("glibc: thread vector (DTV) of thread %d", t.tid)
		}
	}
}

// mmapped finds the mmapped chunks: each is a mapping of its own (the
// kernel may merge adjacent ones, and other anonymous memory, into one
// line of the maps), its header at the start or, for an aligned block, at
// prev_size bytes into it. The census looks at the start of each
// anonymous mapping and right after each chunk it finds; when that does
// not find what mp_ counts, it looks at every page of the rest.
func (w *walker) mmapped(maps []proc.Mapping) {
	var heaps []Span
	for _, a := range w.c.Arenas {
		for _, h := range a.Heaps {
			if a.Main {
				heaps = append(heaps, h)
			} else {
				heaps = append(heaps, Span{h.Start, h.Start + w.heapMax})
			}
		}
	}
	var rest []Span
	var found, bytes uint64
	for _, m := range maps {
		if m.File() || m.Path != "" && !isAnonName(m.Path) || len(m.Perms) < 2 || m.Perms[:2] != "rw" {
			continue
		}
		for _, s := range subtract(Span{m.Start, m.End}, heaps) {
			pos := s.Start
			for pos < s.End {
				end := pos + min(pageSize, s.End-pos)
				ch, lead, ok := w.mmappedAt(pos, s, end, end)
				if !ok || ch.Addr-lead != pos {
					break
				}
				w.addMmapped(ch, lead, s.End)
				found++
				bytes += ch.Size + lead
				pos = ch.Addr + ch.Size
			}
			if pos < s.End {
				rest = append(rest, Span{pos, s.End})
			}
		}
	}
	if found < w.c.NMmaps || bytes < w.c.MmappedMem {
		for _, s := range rest {
			// A chunk's header is on a page malloc wrote: the pages the
			// process never wrote need not be read (nor faulted in).
			var written *proc.Resident
			if w.pid > 0 {
				written, _ = proc.ReadWritten(w.pid, s.Start, s.End)
			}
			for pos := s.Start; pos < s.End && (found < w.c.NMmaps || bytes < w.c.MmappedMem); {
				if written != nil && !written.Page(pos) {
					pos += pageSize
					continue
				}
				ch, lead, ok := w.mmappedAt(pos, s, pos+min(pageSize, s.End-pos), s.End)
				if !ok {
					pos += pageSize
					continue
				}
				w.addMmapped(ch, lead, s.End)
				found++
				bytes += ch.Size + lead
				pos = ch.Addr + ch.Size
			}
		}
	}
	if found != w.c.NMmaps || bytes != w.c.MmappedMem {
		w.c.problem(0, 0, "mp_ counts %d mmapped chunks (%d bytes); the census found %d (%d bytes)", w.c.NMmaps, w.c.MmappedMem, found, bytes)
	}
}

// mmappedAt looks in the page at pos, of span s, for the header of a
// mmapped chunk whose mapping starts at or before pos, within s; limit
// bounds what is read ahead.
func (w *walker) mmappedAt(pos uint64, s Span, pageEnd, limit uint64) (Chunk, uint64, bool) {
	b, err := w.mem.view(pos, pageEnd-pos, limit)
	if err != nil {
		return Chunk{}, 0, false
	}
	for o := uint64(0); o+4*sizeSz <= uint64(len(b)); o += align {
		hdr := binary.LittleEndian.Uint64(b[o+sizeSz:])
		if hdr&flagBits != isMmapped {
			continue
		}
		lead, size := binary.LittleEndian.Uint64(b[o:]), hdr&^flagBits
		addr := pos + o
		start := addr - lead
		if lead > addr-s.Start || lead%align != 0 || start%pageSize != 0 || size < minSize ||
			(lead+size)%pageSize != 0 || size > s.End-addr {
			continue
		}
		first := binary.LittleEndian.Uint64(b[o+2*sizeSz:])
		ch := Chunk{Addr: addr, Size: size, First: first, Arena: -1, State: Mmapped}
		if lead == 0 {
			if real, lead, ok := w.aligned(ch); ok {
				return real, lead, true
			}
		}
		return ch, lead, true
	}
	return Chunk{}, 0, false
}

// aligned looks, in the mapping of a mmapped chunk whose header starts
// it, for the header memalign wrote when it aligned the block: the old one
// stays where it was. The new header has the bytes it moved by as
// prev_size and the same mapping: it is in the first page, or, for an
// alignment of a page or more, just before a multiple of that alignment.
func (w *walker) aligned(ch Chunk) (Chunk, uint64, bool) {
	start, total := ch.Addr, ch.Size
	match := func(hdr uint64) (Chunk, uint64, bool) {
		b, err := w.mem.small(hdr, 4*sizeSz)
		if err != nil {
			return Chunk{}, 0, false
		}
		lead := hdr - start
		if binary.LittleEndian.Uint64(b) != lead || binary.LittleEndian.Uint64(b[sizeSz:]) != (total-lead)|isMmapped {
			return Chunk{}, 0, false
		}
		return Chunk{Addr: hdr, Size: total - lead, First: binary.LittleEndian.Uint64(b[2*sizeSz:]), Arena: -1, State: Mmapped}, lead, true
	}
	for o := uint64(align); o+4*sizeSz <= min(pageSize, total); o += align {
		if c, lead, ok := match(start + o); ok {
			return c, lead, true
		}
	}
	for a := pageSize; a < total; a <<= 1 {
		// _int_memalign: the first multiple of a past the block, moved on
		// by a when that leaves less than MINSIZE before it.
		x := (start + 2*sizeSz + a - 1) &^ (a - 1)
		if x-2*sizeSz-start < minSize {
			x += a
		}
		if x-2*sizeSz+4*sizeSz > start+total {
			break
		}
		if c, lead, ok := match(x - 2*sizeSz); ok {
			return c, lead, true
		}
	}
	return Chunk{}, 0, false
}

func (w *walker) addMmapped(ch Chunk, lead, end uint64) {
	r := run{arena: -1, start: ch.Addr - lead, end: ch.Addr + ch.Size}
	r.buf.add(ch, 0)
	if b, ok := printable(w.mem, ch.User(), ch.Usable(), end); ok {
		r.text = []textRef{{0, uint32(len(w.c.textBuf)), uint32(len(b))}}
		w.c.textBuf = append(w.c.textBuf, b...)
	}
	w.c.mmapLead[ch.Addr] = lead
	w.runs = append(w.runs, r)
}

// isAnonName reports whether a mapping's name is one the kernel gives
// anonymous memory (named with PR_SET_VMA_ANON_NAME) that malloc could own.
func isAnonName(p string) bool {
	return len(p) > 6 && p[:6] == "[anon:"
}

// subtract returns s less the spans cut (which may overlap it anywhere).
func subtract(s Span, cut []Span) []Span {
	out := []Span{s}
	for _, c := range cut {
		var next []Span
		for _, o := range out {
			if c.End <= o.Start || c.Start >= o.End {
				next = append(next, o)
				continue
			}
			if c.Start > o.Start {
				next = append(next, Span{o.Start, c.Start})
			}
			if c.End < o.End {
				next = append(next, Span{c.End, o.End})
			}
		}
		out = next
	}
	return out
}
