package preload

import (
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
)

// TestHeldRecordsDoNotShortenNap leaves a record the watermark holds back
// (a busy thread's latest, beside an idle thread's ring) and checks that the
// pump still sleeps the whole flush interval. Sampled records trickle in
// steadily, so one is nearly always held: a pump that woke for them early
// (every 2×watermarkSlack) woke thousands of times a second for records no
// one waits for sooner than the flush interval.
func TestHeldRecordsDoNotShortenNap(t *testing.T) {
	c, sink := testCollector()
	c.cfg.FlushInterval = 100 * time.Millisecond
	busy, idle := testRing(t, 1<<16), testRing(t, 1<<16)
	p := &proc{pid: 1, conns: 1, rings: []*ring{busy, idle}}
	c.procs = []*proc{p}
	now := c.clk.now()
	produce(busy, recThread|2<<8|1<<32, 0)
	produce(busy, uint64(event.FuncFree)|3<<8, now-2*c.clk.slack, 0x10) // older than the idle ring's bound
	produce(busy, uint64(event.FuncFree)|3<<8, now+c.clk.slack, 0x20)   // newer: held
	setSeq(busy, 2, now+c.clk.slack)
	c.drain(p, false)
	if len(sink.events) != 1 || sink.events[0].Addr != 0x10 {
		t.Fatalf("delivered %+v, want the older record only", sink.events)
	}
	if busy.pos == busy.limit {
		t.Fatal("no record held back by the watermark: the test does not test anything")
	}
	if d := c.nap(); d != c.cfg.FlushInterval {
		t.Errorf("with a record held back the pump sleeps %v, want the flush interval %v", d, c.cfg.FlushInterval)
	}
	c.flushes = append(c.flushes, &flushReq{})
	if d := c.nap(); d >= c.cfg.FlushInterval {
		t.Errorf("with a Flush waiting the pump sleeps %v", d)
	}
}
