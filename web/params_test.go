package web

import (
	"net/http"
	"testing"
)

// Out-of-range parameters are clamped where API.md says so, and a 400
// where they cannot be: a time past what the trace's clock counts (issue
// 27 #14: from_ns=9223372036854775807 answered the whole trace with 200),
// an integer that is not one, a pid that is not one, a share that is not
// a number.
func TestParamsOutOfRange(t *testing.T) {
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	var whole Window
	getJSON(t, srv.URL+"/api/window", &whole)
	if whole.ToNs <= whole.FromNs {
		t.Fatalf("the whole trace's window %d..%d", whole.FromNs, whole.ToNs)
	}
	for _, q := range []string{
		"from_ns=9223372036854775807",
		"to_ns=9223372036854775807",
		"at_ns=9223372036854775807&cost=instant",
		"from_ns=9223372036854775808",
		"from_ns=-9223372036854775809",
		"from_ns=1e9",
		"to_ns=-5",
		"from_ns=10&to_ns=10",
		"pid=-1",
		"tid=4294967296",
		"top=-1",
		"cost=nosuch",
	} {
		if c := status(t, srv.URL+"/api/window?"+q); c != http.StatusBadRequest {
			t.Errorf("/api/window?%s: %d, want 400", q, c)
		}
	}
	if c := status(t, srv.URL+"/api/flame?min_share=NaN"); c != http.StatusBadRequest {
		t.Errorf("min_share=NaN: %d, want 400", c)
	}

	// Clamped to the trace: a window after its end is empty, at its end;
	// one from before its start begins at it.
	var w Window
	getJSON(t, srv.URL+"/api/window?from_ns=1000000000000000000", &w)
	if w.FromNs != whole.ToNs || w.ToNs != whole.ToNs || w.Total.AIFI.Blocks != 0 || w.Total.AIFO.Blocks != 0 || w.Total.AOFI.Blocks != 0 ||
		w.Total.AOFO != whole.Total.AIFO {
		t.Errorf("a window after the trace: %d..%d, %+v; want empty at its end %d, what is live then AOFO", w.FromNs, w.ToNs, w.Total, whole.ToNs)
	}
	getJSON(t, srv.URL+"/api/window?from_ns=-9223372036854775808", &w)
	if w.FromNs != whole.FromNs || w.ToNs != whole.ToNs || w.Total != whole.Total {
		t.Errorf("a window from before the trace: %d..%d, want the whole trace's %d..%d", w.FromNs, w.ToNs, whole.FromNs, whole.ToNs)
	}
	getJSON(t, srv.URL+"/api/window?from_ns=-20&to_ns=-10", &w)
	if w.FromNs != whole.FromNs || w.ToNs != whole.FromNs || len(w.Sites) != 0 {
		t.Errorf("a window before the trace: %d..%d with %d sites, want empty at its start", w.FromNs, w.ToNs, len(w.Sites))
	}
	var tl Timeline
	getJSON(t, srv.URL+"/api/timeline?points=-5", &tl)
	if len(tl.Points) != 1 {
		t.Errorf("points=-5: %d points, want 1", len(tl.Points))
	}
	var fl FlameAnswer
	getJSON(t, srv.URL+"/api/flame?max_nodes=-1&cost=bytes", &fl)
	if len(fl.Nodes) != 1 {
		t.Errorf("max_nodes=-1: %d nodes, want 1", len(fl.Nodes))
	}
}
