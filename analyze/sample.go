package analyze

import (
	"math"

	"github.com/heapscope/heapscope/event"
)

// Sampled traces. When a trace was sampled at rate R (tracefile.Header's
// SampleRate), an allocation of S bytes was recorded with probability
// p = 1 - exp(-S/R), and so was the free or realloc of each block recorded.
// The model counts each recorded block as S/p bytes and 1/p objects, scaled
// per block before anything is summed, which makes every total an unbiased
// estimate: bytes allocated, frees, live and leaked bytes and blocks, the
// peak, the timeline, per-stack totals and the size histogram. 1/p is not a
// whole number: each block counts floor(1/p) or one more, chosen by a hash
// of its address and time with the probability of the fraction, so that
// counts stay whole and unbiased, and its free takes away what it added.
// Temporaries need every event, and the providers do not record failed
// allocations when they sample: a sampled profile reports NoTemporaries and
// NoFailed.
// A realloc's result is drawn at its new size whatever its old block was
// (tracefile/FORMAT.md), so a realloc recorded weighs its new block by the
// new size, and a recorded block that a realloc not sampled replaced
// arrives as its free.

// SampleWeights returns what one recorded allocation of size bytes stands
// for in a trace sampled at rate: size/p bytes and 1/p objects, with
// p = 1 - exp(-size/rate). A size of 0 (never sampled by the providers)
// stands for itself.
func SampleWeights(size uint64, rate int64) (bytes, objects float64) {
	if rate <= 0 || size == 0 {
		return float64(size), 1
	}
	p := -math.Expm1(-float64(size) / float64(rate))
	return float64(size) / p, 1 / p
}

// sampledBlock is a recorded block's weights: its bytes and a whole number
// of objects (stored in block.tid: temporaries, its use, are off).
func (m *Model) sampledBlock(size, addr uint64, t int64) (uint64, uint32) {
	return SampledBlock(size, addr, t, m.rate)
}

// SampledBlock is what the block of size bytes recorded at addr at time t
// counts in a trace sampled at rate: SampleWeights' bytes, rounded, and a
// whole number of objects, floor(1/p) or one more, chosen by a hash of the
// address and time with the probability of the fraction. Whoever counts
// sampled blocks (the model, serve's index, a session's totals) counts
// each the same: the one rule every view of a sampled trace scales by.
func SampledBlock(size, addr uint64, t int64, rate int64) (bytes uint64, objects uint32) {
	b, o := SampleWeights(size, rate)
	return uint64(math.Round(b)), wholeObjects(o, addr, t)
}

// wholeObjects is o objects as a whole number, floor(o) or one more, chosen
// by a hash of the block's address and time with the probability of the
// fraction: unbiased, and the same each time the block is counted.
func wholeObjects(o float64, addr uint64, t int64) uint32 {
	n := math.Floor(o)
	if frac := o - n; frac > 0 {
		h := (addr ^ uint64(t)*0x9e3779b97f4a7c15) * 0xbf58476d1ce4e5b9
		h ^= h >> 31
		if float64(h>>11)*0x1p-53 < frac {
			n++
		}
	}
	return uint32(min(n, math.MaxUint32))
}

// EventWeights is what a recorded allocation (or a realloc's result)
// counts in a trace sampled at rate: when its provider weighed it (an
// allocation through an otel_memory USDT probe carries the probe's weight
// in OldSize, see event.Event), that many bytes and weight/size objects;
// else SampledBlock's.
func EventWeights(e *event.Event, rate int64) (bytes uint64, objects uint32) {
	if e.Kind == event.KindAlloc && e.OldSize != 0 {
		return e.OldSize, wholeObjects(float64(e.OldSize)/float64(max(e.Size, 1)), e.Addr, e.Time)
	}
	return SampledBlock(e.Size, e.Addr, e.Time, rate)
}

// SampleVariance returns the variance of the bytes a recorded block
// counts, bytes (SampledBlock's), as an estimate of the bytes it stands
// for: (1-p)·bytes², p being the probability that an allocation of its
// size was recorded (found again from bytes, which grows with the size).
// Summed over blocks it is the variance of a total's estimate (each block
// recorded or not independently): its square root is the total's
// standard error.
func SampleVariance(bytes uint64, rate int64) float64 {
	if rate <= 0 || bytes == 0 {
		return 0
	}
	// bytes/rate = x/(1-exp(-x)), x = size/rate: solve for x.
	y := float64(bytes) / float64(rate)
	lo, hi := 0.0, y
	for i := 0; i < 60 && hi-lo > 1e-12*hi; i++ {
		x := (lo + hi) / 2
		if g := x / -math.Expm1(-x); g < y {
			lo = x
		} else {
			hi = x
		}
	}
	b := float64(bytes)
	return math.Exp(-(lo+hi)/2) * b * b
}

// sampledEvent applies one heap event of a sampled trace.
func (m *Model) sampledEvent(p *proc, t *thread, e *event.Event) {
	switch e.Kind {
	case event.KindAlloc, event.KindMmap:
		si := m.siteOf(p, e.Stack)
		if e.Addr == 0 {
			m.sites[si].allocs++
			m.sites[si].failed++
			return
		}
		n := m.sampledAlloc(p, si, e)
		m.sites[si].allocs += n
		m.sampled++
	case event.KindFree, event.KindMunmap:
		if e.Addr != 0 {
			m.sampledFree(p, e.Addr)
		}
	case event.KindRealloc:
		si := m.siteOf(p, e.Stack)
		if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
			m.sites[si].reallocs++
			m.sites[si].failed++
			return
		}
		if e.OldAddr != 0 {
			m.sampledFree(p, e.OldAddr)
		}
		n := uint64(1)
		if e.Addr != 0 {
			n = m.sampledAlloc(p, si, e)
		}
		m.sites[si].reallocs += n
		m.sampled++
	}
}

func (m *Model) sampledAlloc(p *proc, si int32, e *event.Event) uint64 {
	bytes, n := EventWeights(e, m.rate)
	if old, ok := m.blocks.put(p, e.Addr, block{size: bytes, site: si, tid: n}); ok {
		m.missed++
		m.sampledRelease(old, false)
	}
	s := &m.sites[si]
	m.touch(s)
	v := SampleVariance(bytes, m.rate)
	if s.vars == nil {
		s.vars = &siteVars{}
	}
	s.vars.live += v
	m.bytesVar += v
	s.liveBytes += bytes
	s.liveBlocks += uint64(n)
	s.bytes += bytes
	m.liveBytes += bytes
	m.liveBlocks += uint64(n)
	m.hist[sizeBucket(e.Size)] += uint64(n)
	m.peaked(e.Time)
	return uint64(n)
}

func (m *Model) sampledFree(p *proc, addr uint64) {
	b, ok := m.blocks.take(p, addr)
	if !ok {
		m.unmatched++
		return
	}
	m.sampledRelease(b, true)
}

func (m *Model) sampledRelease(b block, counted bool) {
	s := &m.sites[b.site]
	m.touch(s)
	n := uint64(b.tid)
	if s.vars != nil {
		s.vars.live = max(s.vars.live-SampleVariance(b.size, m.rate), 0)
	}
	s.liveBytes -= b.size
	s.liveBlocks -= n
	if counted {
		s.frees += n
		s.freedBytes += b.size
	}
	m.liveBytes -= b.size
	m.liveBlocks -= n
}
