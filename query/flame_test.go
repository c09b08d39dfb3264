package query

import "testing"

// The flame graph of report_known's leaks: 4024 bytes, of which leak_site
// has 3000 and calloc_site 1024, both called from main; inverted, the two
// sites are the root's children.
func TestFlame(t *testing.T) {
	x := build(t, record(t, "report_known"))
	res := x.Window(Filter{})
	fl := x.Flame(res, CostLeaks, true, 0, 0)
	if fl.Total != 4024 || fl.Nodes[0].Value != 4024 {
		t.Fatalf("total %d", fl.Total)
	}
	kids := map[string]uint64{}
	for _, n := range fl.Nodes {
		if n.Parent == 0 {
			kids[n.Name] = n.Value
		}
	}
	if len(kids) != 2 || kids["leak_site"] != 3000 || kids["calloc_site"] != 1024 {
		t.Errorf("inverted root's children %v", kids)
	}
	up := x.Flame(res, CostLeaks, false, 0, 0)
	var mainV uint64
	var selfSum uint64
	for i, n := range up.Nodes {
		if n.Name == "main" {
			mainV = n.Value
		}
		selfSum += n.Self
		if n.Parent >= i || (i > 0 && up.Nodes[n.Parent].Depth != n.Depth-1) {
			t.Fatalf("node %d %+v is not after its parent", i, n)
		}
	}
	if mainV != 4024 || selfSum != 4024 {
		t.Errorf("main %d, selves %d", mainV, selfSum)
	}
	// Capped: the largest nodes, still a tree.
	capped := x.Flame(res, CostCalls, false, 0, 3)
	if len(capped.Nodes) != 3 || capped.Hidden == 0 {
		t.Errorf("capped to 3: %d nodes, %d hidden", len(capped.Nodes), capped.Hidden)
	}
	// A share threshold drops the small sites.
	for _, n := range x.Flame(res, CostLeaks, true, 0.5, 0).Nodes {
		if n.Name == "calloc_site" || n.Value < 3000 {
			t.Errorf("min share 0.5 kept %+v", n)
		}
	}
	fns := map[string]Function{}
	for _, f := range x.Functions(res, CostLeaks, 0) {
		fns[f.Name] = f
	}
	if m, l := fns["main"], fns["leak_site"]; m.Total != 4024 || m.Self != 0 || l.Total != 3000 || l.Self != 3000 {
		t.Errorf("functions %+v", fns)
	}
}
