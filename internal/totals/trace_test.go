package totals_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/totals"
	"github.com/heapscope/heapscope/tracefile"
)

// batcher keeps a trace's events, in batches of the size the preload
// collector hands the sink.
type batcher struct {
	event.Sink
	batches [][]event.Event
}

func (b *batcher) Events(evs []event.Event) error {
	for _, e := range evs {
		if n := len(b.batches); n == 0 || len(b.batches[n-1]) == 1024 {
			b.batches = append(b.batches, make([]event.Event, 0, 1024))
		}
		n := len(b.batches) - 1
		b.batches[n] = append(b.batches[n], e)
	}
	return nil
}

// traceBatches traces cmd with the preload provider and returns its events.
func traceBatches(b *testing.B, cmd *exec.Cmd) batcher {
	path := filepath.Join(b.TempDir(), "bench.hst")
	s, err := heapscope.Launch("aggbench", heapscope.Properties{File: path}, cmd)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		b.Fatal(err)
	}
	r, err := tracefile.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	bt := batcher{Sink: event.Discard}
	if err := r.Replay(&bt, tracefile.Window{}); err != nil {
		b.Fatal(err)
	}
	return bt
}

// BenchmarkAggregateTrace: what the totals cost per event on the stream of
// a real session traced by the preload provider (churn from
// testdata/workloads in one and in two threads, python3), its events given
// again in batches of 1024.
func BenchmarkAggregateTrace(b *testing.B) {
	bin := testutil.MustBuild(b, "churn", testutil.Options{})
	python := func() *exec.Cmd {
		// As bench/programs runs it: objects kept for a while, every
		// one from the C allocator.
		cmd := exec.Command("/usr/bin/python3.11", "-c", "import json\ndata=[]\nfor i in range(300000):\n"+
			"    d={'k':i,'s':str(i)*3,'l':[i,i+1,i+2]}\n    data.append(d)\n    if len(data)>1000: data.pop(0)\n"+
			"print(len(json.dumps(data)))\n")
		cmd.Env = append(os.Environ(), "PYTHONMALLOC=malloc")
		return cmd
	}
	for _, w := range []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"churn1thread", func() *exec.Cmd { return exec.Command(bin, "1000000", "1") }},
		{"churn2threads", func() *exec.Cmd { return exec.Command(bin, "1000000", "2") }},
		{"python3", python},
	} {
		var bt batcher
		b.Run(w.name, func(b *testing.B) {
			if bt.batches == nil {
				bt = traceBatches(b, w.cmd())
			}
			n := 0
			for _, batch := range bt.batches {
				n += len(batch)
			}
			// The session's batch is in cache when the totals are
			// counted (the collector has just written it, the trace
			// writer read it): each batch is copied to one buffer, and
			// the time of the copies alone is taken away.
			buf := make([]event.Event, 1024)
			var copying, both time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a := totals.New()
				t0 := time.Now()
				for _, batch := range bt.batches {
					copy(buf, batch)
				}
				t1 := time.Now()
				for _, batch := range bt.batches {
					a.Events(buf[:copy(buf, batch)])
				}
				copying += t1.Sub(t0)
				both += time.Since(t1)
			}
			b.ReportMetric(float64(both-copying)/float64(b.N)/float64(n), "ns/event")
		})
	}
}
