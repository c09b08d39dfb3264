package query

import (
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/heapscope/heapscope/symbolize"
)

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

// slowNode is a node of flameSlow.
type slowNode struct {
	Node
	children map[string]int
}

// flameSlow is Flame as it was before the sites' tries: the tree built
// for each question, by name. The oracle of TestFlameTrie.
func (x *Index) flameSlow(res *Result, c Cost, inverted bool, minShare float64, maxNodes int) *Flame {
	nodes := []slowNode{{Node: Node{Name: "all", Parent: -1}, children: map[string]int{}}}
	for _, s := range x.sites {
		v := c.Of(&res.Sites[s.ID])
		if v == 0 {
			continue
		}
		nodes[0].Value += v
		cur := 0
		n := len(s.Frames)
		if n == 0 {
			cur = slowChild(&nodes, cur, symbolize.Frame{Function: "[no stack]"})
			nodes[cur].Value += v
		}
		for i := 0; i < n; i++ {
			f := s.Frames[n-1-i]
			if inverted {
				f = s.Frames[i]
			}
			cur = slowChild(&nodes, cur, f)
			nodes[cur].Value += v
		}
		nodes[cur].Self += v
	}
	fl := &Flame{Cost: c.String(), Inverted: inverted, Total: nodes[0].Value}
	// Which nodes to keep: at least minShare, and the maxNodes largest
	// (a parent is never smaller than its child, and sorts first on a tie
	// by its depth, so that the kept nodes form a tree).
	min := uint64(minShare * float64(fl.Total))
	order := make([]int, 0, len(nodes))
	for i := range nodes {
		if nodes[i].Value >= min && nodes[i].Value > 0 || i == 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		na, nb := &nodes[order[a]], &nodes[order[b]]
		if na.Value != nb.Value {
			return na.Value > nb.Value
		}
		return na.Depth < nb.Depth
	})
	if maxNodes > 0 && len(order) > maxNodes {
		order = order[:maxNodes]
	}
	keep := make([]bool, len(nodes))
	for _, i := range order {
		keep[i] = true
	}
	fl.Hidden = len(nodes) - len(order)
	// Depth-first, children by value.
	var walk func(i, parent int)
	walk = func(i, parent int) {
		n := nodes[i]
		n.Parent = parent
		me := len(fl.Nodes)
		kids := make([]int, 0, len(n.children))
		for _, k := range n.children {
			if keep[k] {
				kids = append(kids, k)
			}
		}
		fl.Nodes = append(fl.Nodes, n.Node)
		sort.Slice(kids, func(a, b int) bool {
			ka, kb := &nodes[kids[a]], &nodes[kids[b]]
			if ka.Value != kb.Value {
				return ka.Value > kb.Value
			}
			return ka.Name < kb.Name
		})
		for _, k := range kids {
			walk(k, me)
		}
	}
	walk(0, -1)
	return fl
}

func slowChild(nodes *[]slowNode, parent int, f symbolize.Frame) int {
	name := f.Name()
	p := &(*nodes)[parent]
	if i, ok := p.children[name]; ok {
		return i
	}
	i := len(*nodes)
	p.children[name] = i
	*nodes = append(*nodes, slowNode{Node: Node{Name: name, Module: f.Module, File: f.File, Line: f.Line, Depth: p.Depth + 1}, children: map[string]int{}})
	return i
}

// Flame over the sites' tries is the flame graph built for the question
// alone: on random traces, for every cost, both ways, with thresholds and
// caps, in windows and for the whole trace.
func TestFlameTrie(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 5)
	x := build(t, path)
	for _, x := range []*Index{x, build(t, record(t, "report_known"))} {
		span := x.End() - x.Start()
		for k, f := range []Filter{{}, {From: x.Start() + span/3, To: x.Start() + span/2, At: x.Start() + span/4}} {
			res := x.Window(f)
			for c := Cost(0); c < numCosts; c++ {
				for _, inv := range []bool{false, true} {
					for _, lim := range [][2]float64{{0, 0}, {0.01, 0}, {0, 7}, {0.001, 50}} {
						got := x.Flame(res, c, inv, lim[0], int(lim[1]))
						want := x.flameSlow(res, c, inv, lim[0], int(lim[1]))
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("window %d, cost %s, inverted %v, limits %v: %d nodes, want %d", k, c, inv, lim, len(got.Nodes), len(want.Nodes))
						}
					}
				}
			}
		}
	}
}

// The caller/callee view of report_known's leaks: main called leak_site
// (3000 bytes) and calloc_site (1024) and allocated nothing itself;
// leak_site allocated its 3000 itself, called from main.
func TestCallers(t *testing.T) {
	x := build(t, record(t, "report_known"))
	res := x.Window(Filter{})
	m := x.Callers(res, CostLeaks, "main", 0)
	if m.Total != 4024 || m.Self != 0 || len(m.Callers) != 1 || m.Callers[0].Value != 4024 {
		t.Errorf("main: %+v", m)
	}
	if want := []Neighbour{{"leak_site", 3000}, {"calloc_site", 1024}}; !reflect.DeepEqual(m.Callees, want) {
		t.Errorf("main's callees %+v, want %+v", m.Callees, want)
	}
	l := x.Callers(res, CostLeaks, "leak_site", 0)
	if l.Total != 3000 || l.Self != 3000 || !reflect.DeepEqual(l.Callers, []Neighbour{{"main", 3000}}) || !reflect.DeepEqual(l.Callees, []Neighbour{{SelfCallee, 3000}}) {
		t.Errorf("leak_site: %+v", l)
	}
	if n := x.Callers(res, CostLeaks, "no_such_function", 0); n.Total != 0 || len(n.Callers)+len(n.Callees) != 0 {
		t.Errorf("an unknown function: %+v", n)
	}
	if top := x.Callers(res, CostLeaks, "main", 1); len(top.Callees) != 1 || top.Callees[0].Name != "leak_site" {
		t.Errorf("top 1: %+v", top.Callees)
	}
}
