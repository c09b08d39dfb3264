package census

import (
	"fmt"
	"sort"

	"github.com/heapscope/heapscope/internal/proc"
)

// residency is what TakeOptions.RSS reads while the process is stopped:
// smaps, and which pages of its writable anonymous mappings are resident.
type residency struct {
	smaps  []proc.Smaps
	pages  []*proc.Resident // pages[i] for smaps[i]; nil where not read (file-backed, or no RSS)
	rollup proc.Smaps
}

func readResidency(pid int) (*residency, error) {
	sm, err := proc.ReadSmaps(pid)
	if err != nil {
		return nil, err
	}
	sort.Slice(sm, func(i, j int) bool { return sm[i].Start < sm[j].Start })
	r := &residency{smaps: sm, pages: make([]*proc.Resident, len(sm))}
	for i, m := range sm {
		if m.Rss == 0 || m.File() {
			continue
		}
		if r.pages[i], err = proc.ReadResident(pid, m.Start, m.End); err != nil {
			return nil, err
		}
	}
	if r.rollup, err = proc.ReadSmapsRollup(pid); err != nil {
		return nil, err
	}
	return r, nil
}

// Part is one part of a process's RSS.
type Part uint8

// The parts of RSS, in the order RSS lists them.
const (
	HeapInUse     Part = iota // the usable bytes of the blocks the program holds
	HeapOverhead              // chunk headers, libc's own blocks, heap and arena headers, fenceposts
	FreeBins                  // free chunks in bins
	FreeFastbins              // free chunks in fastbins
	FreeTcache                // free chunks in tcaches
	FreeTop                   // top chunks
	HeapUnknown               // chunks whose state a corrupted header hides
	MmappedChunks             // mmapped chunks, whole mappings
	OtherAnon                 // other anonymous memory: thread stacks, the program's own mappings
	FileModified              // file-backed pages the process wrote (private dirty: .data, relocations)
	FileClean                 // file-backed pages as the file has them: code, read-only data, mapped files
	nParts
)

var partNames = [nParts]string{
	HeapInUse:     "heap in use",
	HeapOverhead:  "allocator overhead",
	FreeBins:      "free, in bins",
	FreeFastbins:  "free, in fastbins",
	FreeTcache:    "free, in tcaches",
	FreeTop:       "free, top chunks",
	HeapUnknown:   "heap, state unknown (corrupted)",
	MmappedChunks: "mmapped chunks",
	OtherAnon:     "other anonymous memory",
	FileModified:  "file-backed, modified",
	FileClean:     "file-backed, clean or shared",
}

func (p Part) String() string {
	if p < nParts {
		return partNames[p]
	}
	return fmt.Sprintf("part(%d)", uint8(p))
}

// Line is one part of RSS.
type Line struct {
	Part Part
	// Rss is the part's resident bytes; Pss its proportional share.
	Rss, Pss uint64
	// Bytes is what the census counts in the part, resident or not (the
	// chunks' sizes; 0 for the parts that are not the heap's): free space
	// malloc never touched is in Bytes and not in Rss.
	Bytes uint64
	// Measured says whether Rss is measured (counted page by page) or
	// estimated; How says how.
	Measured bool
	How      string
}

// RSS is a process's resident memory explained: its parts add up to Rss
// and Pss, which are smaps' counters added up over every mapping.
type RSS struct {
	Rss, Pss, Swap uint64
	// Rollup is smaps_rollup's Rss, read at the same moment: the kernel's
	// own sum.
	Rollup uint64
	Lines  []Line
	// Trimmable is an estimate of the resident bytes malloc_trim(0) would
	// give back: the whole pages inside free chunks in bins and fastbins,
	// and the main arena's top less a page.
	Trimmable uint64
	// Disagreement is resident bytes the pages counted in the heap's
	// mappings exceed smaps' RSS of those mappings by (pagemap and smaps
	// read a moment apart, or zero pages that could not be told apart):
	// 0 when the parts are exact.
	Disagreement uint64
	// ZeroPagesKnown says whether the kernel's zero page could be told
	// from resident memory (it needs CAP_SYS_ADMIN); without, the heap's
	// lines may count pages never written that smaps does not.
	ZeroPagesKnown bool
}

// Line returns the line of part p.
func (r RSS) Line(p Part) Line {
	for _, l := range r.Lines {
		if l.Part == p {
			return l
		}
	}
	return Line{Part: p}
}

// accounts attributes resident bytes to parts, mapping by mapping.
type accounts struct {
	res  *residency
	rss  [][nParts]uint64
	last int
}

// add counts the resident bytes of [lo, hi) in part p, and returns them.
func (a *accounts) add(lo, hi uint64, p Part) uint64 {
	sm := a.res.smaps
	if a.last >= len(sm) || lo < sm[a.last].Start || lo >= sm[a.last].End {
		a.last = sort.Search(len(sm), func(i int) bool { return sm[i].End > lo })
	}
	var n uint64
	for i := a.last; i < len(sm) && sm[i].Start < hi; i++ {
		pg := a.res.pages[i]
		if pg == nil {
			continue
		}
		b := pg.Bytes(max(lo, sm[i].Start), min(hi, sm[i].End))
		a.rss[i][p] += b
		n += b
	}
	return n
}

// RSS explains the process's RSS at the census: it needs TakeOptions.RSS.
func (c *Census) RSS() (RSS, error) {
	if c.res == nil {
		return RSS{}, fmt.Errorf("census: the census was taken without TakeOptions.RSS")
	}
	res := c.res
	a := &accounts{res: res, rss: make([][nParts]uint64, len(res.smaps))}
	var bytes [nParts]uint64
	var trim uint64
	for i, ch := range c.Chunks {
		end := ch.Addr + ch.Size
		switch ch.State {
		case InUse:
			if _, internal := c.Internal[ch.Addr]; internal {
				a.add(ch.Addr, end, HeapOverhead)
				bytes[HeapOverhead] += ch.Size
				continue
			}
			a.add(ch.Addr, ch.Addr+sizeSz, HeapInUse) // the previous block's last word, or its foot
			a.add(ch.Addr+sizeSz, ch.Addr+2*sizeSz, HeapOverhead)
			a.add(ch.Addr+2*sizeSz, end, HeapInUse)
			bytes[HeapInUse] += ch.Usable()
			bytes[HeapOverhead] += ch.Size - ch.Usable()
		case Mmapped:
			s := c.MmapSpan(i)
			a.add(s.Start, s.End, MmappedChunks)
			bytes[MmappedChunks] += s.End - s.Start
		case Free, Fastbin:
			p := FreeBins
			if ch.State == Fastbin {
				p = FreeFastbins
			}
			a.add(ch.Addr, end, p)
			bytes[p] += ch.Size
			trim += a.trimmable(ch.Addr, ch.Size, c.chunkStruct)
		case Tcache:
			a.add(ch.Addr, end, FreeTcache)
			bytes[FreeTcache] += ch.Size
		case Top:
			a.add(ch.Addr, end, FreeTop)
			bytes[FreeTop] += ch.Size
			if ch.Arena >= 0 && c.Arenas[ch.Arena].Main && ch.Size > minSize+1 {
				// systrim(0): all but MINSIZE + 1 bytes, in whole pages.
				extra := (ch.Size - minSize - 1) &^ (pageSize - 1)
				trim += a.peek(end-extra, end)
			}
		case Fencepost:
			a.add(ch.Addr, end, HeapOverhead)
			bytes[HeapOverhead] += ch.Size
		case Unknown:
			a.add(ch.Addr, end, HeapUnknown)
			bytes[HeapUnknown] += ch.Size
		}
	}
	// What the arenas hold besides chunks: headers, alignment, and the
	// rest of each heap's reservation.
	for _, ar := range c.Arenas {
		for _, h := range ar.Heaps {
			end := h.End
			if !ar.Main {
				end = h.Start + c.heapMax
			}
			pos := h.Start
			i, _ := c.Find(h.Start)
			for ; i < len(c.Chunks) && c.Chunks[i].Addr < end; i++ {
				ch := c.Chunks[i]
				if ch.Arena < 0 {
					continue
				}
				if ch.Addr > pos {
					a.add(pos, ch.Addr, HeapOverhead)
					bytes[HeapOverhead] += ch.Addr - pos
				}
				pos = max(pos, ch.Addr+ch.Size)
			}
			if pos < end {
				a.add(pos, end, HeapOverhead)
				if pos < h.End {
					bytes[HeapOverhead] += h.End - pos
				}
			}
		}
	}

	r := RSS{Trimmable: trim, Rollup: res.rollup.Rss, ZeroPagesKnown: true}
	var rss, pss [nParts]float64
	for i, m := range res.smaps {
		r.Rss += m.Rss
		r.Pss += m.Pss
		r.Swap += m.Swap
		if res.pages[i] != nil && !res.pages[i].ZeroKnown {
			r.ZeroPagesKnown = false
		}
		parts := a.rss[i]
		if m.File() {
			parts[FileModified] = min(m.PrivateDirty, m.Rss)
			parts[FileClean] = m.Rss - parts[FileModified]
		} else {
			var heap uint64
			for _, b := range parts {
				heap += b
			}
			if heap > m.Rss {
				// Scale the heap's parts down to what smaps counts, and say
				// by how much they were over.
				r.Disagreement += heap - m.Rss
				scale := float64(m.Rss) / float64(heap)
				var sum uint64
				for p := range parts {
					parts[p] = uint64(float64(parts[p]) * scale)
					sum += parts[p]
				}
				heap = sum
			}
			parts[OtherAnon] = m.Rss - heap
		}
		ratio := 1.0
		if m.Rss > 0 {
			ratio = float64(m.Pss) / float64(m.Rss)
		}
		for p, b := range parts {
			rss[p] += float64(b)
			pss[p] += float64(b) * ratio
		}
	}
	how := [nParts]string{
		HeapInUse:     "resident pages (pagemap) of blocks in use, less their headers; usable size, not the size asked for, which glibc does not keep",
		HeapOverhead:  "resident pages of chunk headers, libc's own blocks (tcaches, thread vectors), fenceposts, heap and arena headers",
		FreeBins:      "resident pages of free chunks in the bins",
		FreeFastbins:  "resident pages of free chunks in fastbins",
		FreeTcache:    "resident pages of free chunks in tcaches",
		FreeTop:       "resident pages of the arenas' top chunks",
		HeapUnknown:   "resident pages of chunks past corrupted headers",
		MmappedChunks: "resident pages of the mmapped chunks' mappings",
		OtherAnon:     "smaps' RSS of anonymous mappings less the heap's pages in them",
		FileModified:  "smaps' Private_Dirty of file-backed mappings",
		FileClean:     "smaps' RSS of file-backed mappings less Private_Dirty",
	}
	var sumRss, sumPss uint64
	for p := Part(0); p < nParts; p++ {
		if p == HeapUnknown && rss[p] == 0 && bytes[p] == 0 {
			continue
		}
		l := Line{Part: p, Rss: uint64(rss[p] + 0.5), Pss: uint64(pss[p] + 0.5), Bytes: bytes[p], Measured: true, How: how[p]}
		if !r.ZeroPagesKnown && p < OtherAnon {
			l.How += " (zero pages counted: no CAP_SYS_ADMIN)"
		}
		sumRss += l.Rss
		sumPss += l.Pss
		r.Lines = append(r.Lines, l)
	}
	// Rounding the shares of PSS must not lose a byte of the totals.
	if n := len(r.Lines); n > 0 {
		fix := func(line *uint64, sum, total uint64) {
			if sum > total {
				*line -= min(*line, sum-total)
			} else {
				*line += total - sum
			}
		}
		fix(&r.Lines[n-1].Rss, sumRss, r.Rss)
		fix(&r.Lines[n-1].Pss, sumPss, r.Pss)
	}
	return r, nil
}

// trimmable returns the resident bytes malloc_trim's mtrim would give back
// of a free chunk: the whole pages from sizeof(struct malloc_chunk) bytes
// into it to its end.
func (a *accounts) trimmable(addr, size, chunkStruct uint64) uint64 {
	if size <= pageSize-1+chunkStruct {
		return 0
	}
	lo := (addr + chunkStruct + pageSize - 1) &^ (pageSize - 1)
	n := (size - (lo - addr)) &^ (pageSize - 1)
	return a.peek(lo, lo+n)
}

// peek returns the resident bytes of [lo, hi) without counting them.
func (a *accounts) peek(lo, hi uint64) uint64 {
	sm := a.res.smaps
	var n uint64
	for i := sort.Search(len(sm), func(i int) bool { return sm[i].End > lo }); i < len(sm) && sm[i].Start < hi; i++ {
		if pg := a.res.pages[i]; pg != nil {
			n += pg.Bytes(max(lo, sm[i].Start), min(hi, sm[i].End))
		}
	}
	return n
}
