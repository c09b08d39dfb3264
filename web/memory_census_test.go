package web

import (
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// TestRSS: /api/rss gives the census's resident memory explained and what
// was live before the trace; nothing for a trace without a census.
func TestRSS(t *testing.T) {
	path := filepath.Join(t.TempDir(), "census.hst")
	const s = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "rss", Provider: "ebpf", MonoStart: s, Clock: "CLOCK_MONOTONIC"}, tracefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ok(w.Process(event.Process{PID: 7, Time: s, Exe: "/bin/x"}))
	ok(w.Note(event.Census{PID: 7, Time: s + 1e8, Blocks: []event.LiveBlock{{Addr: 0x1000, Size: 100}, {Addr: 0x2000, Size: 200}},
		Groups: []event.CensusGroup{{Lo: 112, Hi: 128, Name: "Circle"}, {Lo: 208, Hi: 224, Name: "string", Text: "hi"}}, BlockGroups: []uint32{0, 1}}))
	ok(w.Note(event.Resident{PID: 7, Time: s + 1e8, RSS: 8192, PSS: 8192, Rollup: 8192, ZeroPagesKnown: true,
		Parts: []event.ResidentPart{{Name: "heap in use", RSS: 4096, PSS: 4096, Bytes: 300, Measured: true, How: "pages"},
			{Name: "file-backed, clean or shared", RSS: 4096, PSS: 4096, Measured: true}}}))
	ok(w.Events([]event.Event{{Time: s + 2e8, PID: 7, TID: 7, Kind: event.KindFree, Addr: 0x2000}}))
	ok(w.Close())
	_, srv := serveTrace(t, path)
	var got RSS
	getJSON(t, srv.URL+"/api/rss", &got)
	if len(got.Resident) != 1 || got.Resident[0].RSS != 8192 || len(got.Resident[0].Parts) != 2 || got.Resident[0].Parts[0].Name != "heap in use" {
		t.Errorf("resident %+v", got.Resident)
	}
	if len(got.Rundowns) != 1 || got.Rundowns[0].Blocks != 2 || got.Rundowns[0].LiveBytes != 100 || len(got.Rundowns[0].Groups) != 2 {
		t.Errorf("rundowns %+v", got.Rundowns)
	}

	_, plain := serveTrace(t, trace(t, "serve_phases"))
	var none RSS
	getJSON(t, plain.URL+"/api/rss", &none)
	if none.Resident == nil || none.Rundowns == nil || len(none.Resident)+len(none.Rundowns) != 0 {
		t.Errorf("a trace without a census: %+v", none)
	}
}
