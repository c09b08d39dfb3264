package query

import (
	"fmt"
	"sort"

	"github.com/heapscope/heapscope/symbolize"
)

// Cost is what a flame graph or a table weighs sites by.
type Cost uint8

// The costs.
const (
	CostLeaks     Cost = iota // bytes not freed by the window's end (Costs.Leaked)
	CostPeak                  // bytes live at the window's peak
	CostInstant               // bytes live at Filter.At
	CostNet                   // bytes live at the end minus at the start (growth; a site that shrank counts 0)
	CostBytes                 // bytes allocated in the window
	CostCalls                 // allocation and reallocation calls in the window
	CostTemporary             // temporary allocations in the window
	CostAIFI                  // bytes of each class
	CostAIFO
	CostAOFI
	CostAOFO
	numCosts
)

var costNames = [numCosts]string{"leaks", "peak", "instant", "net", "bytes", "calls", "temporary", "aifi", "aifo", "aofi", "aofo"}

func (c Cost) String() string {
	if c < numCosts {
		return costNames[c]
	}
	return fmt.Sprintf("cost(%d)", uint8(c))
}

// CostNames are the costs' names, in order.
func CostNames() []string { return costNames[:] }

// ParseCost returns the cost named s.
func ParseCost(s string) (Cost, error) {
	for i, n := range costNames {
		if n == s {
			return Cost(i), nil
		}
	}
	return 0, fmt.Errorf("unknown cost %q (want one of %v)", s, costNames)
}

// Of returns c's value in costs.
func (c Cost) Of(k *Costs) uint64 {
	switch c {
	case CostLeaks:
		return k.Leaked.Bytes
	case CostPeak:
		return k.Peak.Bytes
	case CostInstant:
		return k.Instant.Bytes
	case CostNet:
		if k.End.Bytes > k.Start.Bytes {
			return k.End.Bytes - k.Start.Bytes
		}
		return 0
	case CostBytes:
		return k.Bytes
	case CostCalls:
		return k.Allocations + k.Reallocations
	case CostTemporary:
		return k.Temporary
	case CostAIFI, CostAIFO, CostAOFI, CostAOFO:
		return k.Classes[c-CostAIFI].Bytes
	}
	return 0
}

// Suppressible reports whether c measures leaks, whose suppressed part
// (Options.Suppressions) every view leaves out and states apart, as the
// report does: the leaks, and the net growth (what a window's leaks added).
func (c Cost) Suppressible() bool { return c == CostLeaks || c == CostNet }

// SiteCost returns what site id costs by c in res, and whether its value is
// suppressed (left out of every total of c, and stated apart): the one rule
// that the flame graphs, functions, callers, tables and diffs apply.
func (x *Index) SiteCost(res *Result, c Cost, id int) (v uint64, suppressed bool) {
	v = c.Of(&res.Sites[id])
	return v, v != 0 && c.Suppressible() && x.Suppressed(id)
}

// Total returns res's total by c, suppressed sites left out, and what they
// would have added.
func (x *Index) Total(res *Result, c Cost) (total, suppressed uint64) {
	if !c.Suppressible() || len(x.suppressed) == 0 {
		if c == CostNet {
			// A sum of sites' growths, as the views add them.
			for i := range res.Sites {
				total += c.Of(&res.Sites[i])
			}
			return total, 0
		}
		return c.Of(&res.Total), 0
	}
	for i := range res.Sites {
		if v, sup := x.SiteCost(res, c, i); sup {
			suppressed += v
		} else {
			total += v
		}
	}
	return total, suppressed
}

// Node is a node of a flame graph: a frame on a path from the root.
type Node struct {
	Name   string `json:"name"`
	Module string `json:"module,omitempty"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Parent int    `json:"parent"` // index of the parent node; -1 for the root
	Depth  int    `json:"depth"`
	Value  uint64 `json:"value"` // inclusive
	Self   uint64 `json:"self"`
}

// Flame is a flame graph: its nodes in depth-first order, the root first,
// each node's children by descending value.
type Flame struct {
	Cost     string `json:"cost"`
	Inverted bool   `json:"inverted"`
	Total    uint64 `json:"total"`
	Nodes    []Node `json:"nodes"`
	// Hidden counts the nodes left out: below the share asked for, or
	// beyond the node limit.
	Hidden int `json:"hidden"`
	// Suppressed is what the suppressed sites (Options.Suppressions) would
	// have added to Total: the leak costs (Cost.Suppressible) leave them
	// out, as the report does.
	Suppressed uint64 `json:"suppressed,omitempty"`
	// Estimated says, for a sampled trace, that the values are estimates
	// (report.Report.Estimate); "" when exact.
	Estimated string `json:"estimated,omitempty"`
}

// Flame builds the flame graph of res by cost c: from the callers down
// (the root is "all", then main's callers...), or inverted, from the
// allocating functions up. Nodes under minShare of the total are left out,
// and at most maxNodes are kept (the largest).
func (x *Index) Flame(res *Result, c Cost, inverted bool, minShare float64, maxNodes int) *Flame {
	tr := x.trieOf(inverted)
	// The tree of the sites that cost something: trie nodes are numbered
	// here in the order these sites first reach them, and named by the
	// frame of the first that does, as if it were built from them alone.
	// A node is a small record until it is kept: most are not (a trace's
	// tree has up to millions), and making each a Node cost more than
	// the rest of a flame graph.
	type fnode struct {
		value, self   uint64
		parent, depth int32
		trie          int32 // its trie node; -1: the root
		site, step    int32 // the first site to reach it, and its step there: its frame
	}
	ns := make([]fnode, 1, 1024)
	ns[0] = fnode{parent: -1, trie: -1}
	at := make([]int32, len(tr.nodes)) // trie node → node + 1
	var suppressed uint64
	for _, s := range x.sites {
		v, sup := x.SiteCost(res, c, s.ID)
		if v == 0 {
			continue
		}
		if sup {
			suppressed += v
			continue
		}
		ns[0].value += v
		cur := int32(0)
		for i, t := range tr.paths[s.ID] {
			k := at[t] - 1
			if k < 0 {
				k = int32(len(ns))
				at[t] = k + 1
				ns = append(ns, fnode{parent: cur, depth: ns[cur].depth + 1, trie: t, site: int32(s.ID), step: int32(i)})
			}
			cur = k
			ns[cur].value += v
		}
		ns[cur].self += v
	}
	name := func(i int32) string {
		if i == 0 {
			return "all"
		}
		return tr.nodes[ns[i].trie].name
	}
	fl := &Flame{Cost: c.String(), Inverted: inverted, Total: ns[0].value, Suppressed: suppressed, Estimated: x.Report.Estimate()}
	// Which nodes to keep: at least minShare, and the maxNodes largest
	// (a parent is never smaller than its child, and sorts first on a tie
	// by its depth, so that the kept nodes form a tree).
	min := uint64(minShare * float64(fl.Total))
	order := make([]int32, 0, 1024)
	for i := range ns {
		if ns[i].value >= min && ns[i].value > 0 || i == 0 {
			order = append(order, int32(i))
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		na, nb := &ns[order[a]], &ns[order[b]]
		if na.value != nb.value {
			return na.value > nb.value
		}
		return na.depth < nb.depth
	})
	if maxNodes > 0 && len(order) > maxNodes {
		order = order[:maxNodes]
	}
	keep := make([]bool, len(ns))
	for _, i := range order {
		keep[i] = true
	}
	// The kept nodes' children, each list in the order they were reached.
	kids := make(map[int32][]int32, len(order))
	for i := int32(1); i < int32(len(ns)); i++ {
		if keep[i] {
			kids[ns[i].parent] = append(kids[ns[i].parent], i)
		}
	}
	fl.Hidden = len(ns) - len(order)
	fl.Nodes = make([]Node, 0, len(order))
	// Depth-first, children by value.
	var walk func(i int32, parent int)
	walk = func(i int32, parent int) {
		n := &ns[i]
		node := Node{Name: name(i), Parent: parent, Depth: int(n.depth), Value: n.value, Self: n.self}
		if i != 0 {
			f := tr.frame(x.sites[n.site], int(n.step))
			node.Module, node.File, node.Line = f.Module, f.File, f.Line
		}
		me := len(fl.Nodes)
		fl.Nodes = append(fl.Nodes, node)
		ks := kids[i]
		sort.Slice(ks, func(a, b int) bool {
			ka, kb := &ns[ks[a]], &ns[ks[b]]
			if ka.value != kb.value {
				return ka.value > kb.value
			}
			return name(ks[a]) < name(ks[b])
		})
		for _, k := range ks {
			walk(k, me)
		}
	}
	walk(0, -1)
	return fl
}

// trie is the tree of every site's frames, from the callers down or
// inverted, built once: a flame graph then only adds its costs along
// each site's path, with no names to hash.
type trie struct {
	inverted bool
	nodes    []trieNode
	paths    [][]int32 // by site: its nodes from the root's child down
}

type trieNode struct {
	name string
}

// trieEdge is a child of a trie node by name, while the trie is built.
type trieEdge struct {
	parent int32
	name   string
}

// noStack is the frame of a site without frames.
var noStack = symbolize.Frame{Function: "[no stack]"}

// frame returns the frame of site s at step i of its path.
func (tr *trie) frame(s *Site, i int) symbolize.Frame {
	n := len(s.Frames)
	switch {
	case n == 0:
		return noStack
	case tr.inverted:
		return s.Frames[i]
	}
	return s.Frames[n-1-i]
}

// trieOf returns the trie of the sites, made on first use.
func (x *Index) trieOf(inverted bool) *trie {
	k := 0
	if inverted {
		k = 1
	}
	x.trieOnce[k].Do(func() {
		tr := &trie{inverted: inverted, nodes: []trieNode{{}}, paths: make([][]int32, len(x.sites))}
		// One map of edges while building, not one per node kept for the
		// server's life: a flame graph reads only names and paths.
		children := map[trieEdge]int32{}
		for _, s := range x.sites {
			steps := max(len(s.Frames), 1)
			path := make([]int32, 0, steps)
			cur := int32(0)
			for i := 0; i < steps; i++ {
				f := tr.frame(s, i)
				name := f.Name()
				nx, ok := children[trieEdge{cur, name}]
				if !ok {
					nx = int32(len(tr.nodes))
					children[trieEdge{cur, name}] = nx
					tr.nodes = append(tr.nodes, trieNode{name: name})
				}
				path = append(path, nx)
				cur = nx
			}
			tr.paths[s.ID] = path
		}
		x.tries[k] = tr
	})
	return x.tries[k]
}

// Function is a row of the functions table: a function's cost where it
// allocated itself (Self: the innermost frame of the site) and with what it
// called (Total: anywhere in the site's stack, once per site).
type Function struct {
	Name   string `json:"name"`
	Module string `json:"module,omitempty"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Self   uint64 `json:"self"`
	Total  uint64 `json:"total"`
}

// Functions returns the functions of res's sites by cost c, by Total
// descending, at most top (0: all).
func (x *Index) Functions(res *Result, c Cost, top int) []Function {
	by := map[string]*Function{}
	var seen map[string]bool
	for _, s := range x.sites {
		v, sup := x.SiteCost(res, c, s.ID)
		if v == 0 || sup {
			continue
		}
		seen = map[string]bool{}
		frames := s.Frames
		if len(frames) == 0 {
			frames = []symbolize.Frame{{Function: "[no stack]"}}
		}
		for i, f := range frames {
			name := f.Name()
			fn := by[name]
			if fn == nil {
				fn = &Function{Name: name, Module: f.Module, File: f.File, Line: f.Line}
				by[name] = fn
			}
			if i == 0 {
				fn.Self += v
			}
			if !seen[name] {
				seen[name] = true
				fn.Total += v
			}
		}
	}
	out := make([]Function, 0, len(by))
	for _, f := range by {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		if out[i].Self != out[j].Self {
			return out[i].Self > out[j].Self
		}
		return out[i].Name < out[j].Name
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

// Neighbour is a caller or a callee of a function, and what the sites
// through it cost.
type Neighbour struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// Callers is the caller/callee view of one function: what the sites whose
// stacks hold it cost (Total, each site once; Self, the sites where it is
// the innermost frame), by the function that called it (Callers; "[root]"
// when it is the outermost frame) and by the function it called (Callees;
// "[self]" when it allocated itself). A site that holds the function
// several times (recursion) counts once for each distinct neighbour.
type Callers struct {
	Cost     string      `json:"cost"`
	Function string      `json:"function"`
	Self     uint64      `json:"self"`
	Total    uint64      `json:"total"`
	Callers  []Neighbour `json:"callers"`
	Callees  []Neighbour `json:"callees"`
	// Suppressed is what suppressed sites left out (see Flame).
	Suppressed uint64 `json:"suppressed,omitempty"`
}

// The neighbours' names at the ends of a stack.
const (
	RootCaller = "[root]"
	SelfCallee = "[self]"
)

// Callers returns the caller/callee view of the function named fn (as
// symbolize.Frame.Name names it) in res by cost c, at most top neighbours each way
// (0: all), by value descending.
func (x *Index) Callers(res *Result, c Cost, fn string, top int) *Callers {
	out := &Callers{Cost: c.String(), Function: fn}
	callers, callees := map[string]uint64{}, map[string]uint64{}
	seenUp, seenDown := map[string]bool{}, map[string]bool{}
	for _, s := range x.sites {
		v, sup := x.SiteCost(res, c, s.ID)
		if sup {
			out.Suppressed += v
		}
		if v == 0 || sup {
			continue
		}
		clear(seenUp)
		clear(seenDown)
		found := false
		for i, f := range s.Frames { // innermost first
			if f.Name() != fn {
				continue
			}
			found = true
			up, down := RootCaller, SelfCallee
			if i+1 < len(s.Frames) {
				up = s.Frames[i+1].Name()
			}
			if i > 0 {
				down = s.Frames[i-1].Name()
			} else {
				out.Self += v
			}
			if !seenUp[up] {
				seenUp[up] = true
				callers[up] += v
			}
			if !seenDown[down] {
				seenDown[down] = true
				callees[down] += v
			}
		}
		if found {
			out.Total += v
		}
	}
	out.Callers, out.Callees = ranked(callers, top), ranked(callees, top)
	return out
}

func ranked(m map[string]uint64, top int) []Neighbour {
	out := make([]Neighbour, 0, len(m))
	for k, v := range m {
		out = append(out, Neighbour{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Value != out[j].Value {
			return out[i].Value > out[j].Value
		}
		return out[i].Name < out[j].Name
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}
