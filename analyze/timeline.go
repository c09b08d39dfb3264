package analyze

// timeline samples live bytes and blocks into at most max points. Time is cut
// into buckets of width ns from origin; each point is the sample with the
// most live bytes in its bucket. When a new bucket would exceed max points,
// the width doubles and neighbouring points merge, so the cost per sample is
// O(1) amortised and the memory is O(max) whatever the trace's length.
type timeline struct {
	max    int
	origin int64
	width  int64
	end    int64   // end of the last point's bucket
	top    uint64  // the last point's bytes
	pts    []Point // one per non-empty bucket, in time order
	bkt    []int64 // bucket number of each point
}

// firstWidth is the initial bucket width: fine enough for a trace of a few
// milliseconds, and a long trace costs only a few dozen doublings.
const firstWidth = 1000

func newTimeline(max int) timeline {
	if max < 2 {
		max = 2
	}
	return timeline{max: max}
}

// add records the state after an event at time t. Its common case, a
// sample in the last bucket that is not its largest, is small enough to
// inline.
func (tl *timeline) add(t int64, bytes, blocks uint64) {
	if t < tl.end && bytes <= tl.top {
		return
	}
	tl.record(t, bytes, blocks)
}

func (tl *timeline) record(t int64, bytes, blocks uint64) {
	if len(tl.pts) == 0 {
		tl.origin, tl.width = t, firstWidth
	} else if t < tl.end {
		// Same bucket (or a record slightly out of order): keep the
		// largest sample, the earliest of equals.
		if last := &tl.pts[len(tl.pts)-1]; bytes > last.Bytes {
			*last = Point{t, bytes, blocks}
			tl.top = bytes
		}
		return
	}
	b := (t - tl.origin) / tl.width
	tl.pts = append(tl.pts, Point{t, bytes, blocks})
	tl.bkt = append(tl.bkt, b)
	tl.end = tl.origin + (b+1)*tl.width
	for len(tl.pts) > tl.max {
		tl.coarsen()
	}
	tl.top = tl.pts[len(tl.pts)-1].Bytes
}

// coarsen doubles the bucket width and merges the points that now share a
// bucket.
func (tl *timeline) coarsen() {
	tl.width *= 2
	n := 0
	for i := range tl.pts {
		b := tl.bkt[i] / 2
		if n > 0 && tl.bkt[n-1] == b {
			if tl.pts[i].Bytes > tl.pts[n-1].Bytes {
				tl.pts[n-1] = tl.pts[i]
			}
			continue
		}
		tl.pts[n], tl.bkt[n] = tl.pts[i], b
		n++
	}
	tl.pts, tl.bkt = tl.pts[:n], tl.bkt[:n]
	tl.end = tl.origin + (tl.bkt[n-1]+1)*tl.width
}

// points returns a copy of the points, with final appended as the state at
// the end when it is later than the last point; the result has at most max
// points.
func (tl *timeline) points(final Point) []Point {
	c := *tl
	c.pts = append([]Point(nil), tl.pts...)
	c.bkt = append([]int64(nil), tl.bkt...)
	if len(c.pts) > 0 && final.Time > c.pts[len(c.pts)-1].Time {
		// Make room for the final point without letting it merge away.
		for len(c.pts) > c.max-1 {
			c.coarsen()
		}
		c.pts = append(c.pts, final)
	}
	if len(c.pts) == 0 {
		return nil
	}
	return c.pts
}
