package stopped

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkStopResume stops and resumes the 8-thread scan_threads (9
// threads with its main one), reading one word while stopped, and reports
// the pause the process saw (Paused: from the first interrupt to the last
// detach) and how long Stop itself took.
func BenchmarkStopResume(b *testing.B) {
	tg := startTarget(b, 8)
	word := make([]byte, 8)
	var pauses, stops []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := Stop(tg.pid, Options{})
		if err != nil {
			b.Fatal(err)
		}
		stops = append(stops, time.Since(t0))
		if _, err := p.ReadAt(word, int64(tg.counters)); err != nil {
			b.Fatal(err)
		}
		p.Resume()
		pauses = append(pauses, p.Paused())
		time.Sleep(time.Millisecond) // let it run between stops
	}
	b.StopTimer()
	checkRunning(b, tg.pid)
	tg.quit()
	slices.Sort(pauses)
	slices.Sort(stops)
	b.ReportMetric(float64(pauses[len(pauses)/2].Microseconds()), "µs-pause-median")
	b.ReportMetric(float64(pauses[len(pauses)*9/10].Microseconds()), "µs-pause-p90")
	b.ReportMetric(float64(stops[len(stops)/2].Microseconds()), "µs-stop-median")
}
