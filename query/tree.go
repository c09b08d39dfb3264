package query

import (
	"sort"
)

// TreeCosts are the costs a Tree's node has, one column each, as in
// heaptrack's top-down and bottom-up views.
var TreeCosts = []Cost{CostPeak, CostLeaks, CostCalls, CostTemporary, CostBytes}

// TreeNode is a node of a Tree: a frame on a path from the root, and what
// the sites through it cost, by each of TreeCosts.
type TreeNode struct {
	Name   string `json:"name"`
	Module string `json:"module,omitempty"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Parent int    `json:"parent"` // -1 for the root
	Depth  int    `json:"depth"`
	// Values are inclusive, by TreeCosts; Self is what the node's own
	// sites cost (where it is the innermost frame top-down, the outermost
	// bottom-up).
	Values []uint64 `json:"values"`
	Self   []uint64 `json:"self"`
	// Kids counts its children, kept or not.
	Kids int `json:"kids"`
}

// Tree is a call tree of a window with a column per cost: from the callers
// down (top-down) or from the allocating functions up (bottom-up), its
// nodes in depth-first order, each after its parent, children by the sort
// cost descending.
type Tree struct {
	Inverted bool       `json:"inverted"`
	Costs    []string   `json:"costs"` // the names of TreeCosts
	Sort     string     `json:"sort"`
	Nodes    []TreeNode `json:"nodes"`
	// Hidden counts the nodes left out: under the share asked for by every
	// cost, or past the node limit.
	Hidden int `json:"hidden"`
	// Suppressed is what the leaks of suppressed sites would have added
	// to the root's leaks (as Flame's).
	Suppressed uint64 `json:"suppressed,omitempty"`
}

// Tree builds the call tree of res, children ordered by cost by. A node is
// kept when it has at least minShare of the total of one of the costs, and
// at most maxNodes are kept (those of the largest shares: a parent's are
// never smaller than its child's, so the nodes kept form a tree).
func (x *Index) Tree(res *Result, by Cost, inverted bool, minShare float64, maxNodes int) *Tree {
	tr := x.trieOf(inverted)
	nc := len(TreeCosts)
	sortCol := 0
	for i, c := range TreeCosts {
		if c == by {
			sortCol = i
		}
	}
	type tnode struct {
		parent, depth int32
		trie          int32
		site, step    int32
		kids          int32
	}
	ns := []tnode{{parent: -1, trie: -1}}
	vals := make([]uint64, nc, 1024*nc) // node i's values at [i*nc, (i+1)*nc)
	self := make([]uint64, nc, 1024*nc)
	at := make([]int32, len(tr.nodes))
	out := &Tree{Inverted: inverted, Sort: TreeCosts[sortCol].String()}
	for _, c := range TreeCosts {
		out.Costs = append(out.Costs, c.String())
	}
	v, zero := make([]uint64, nc), make([]uint64, nc)
	for _, s := range x.sites {
		any := false
		for i, c := range TreeCosts {
			var sup bool
			v[i], sup = x.SiteCost(res, c, s.ID)
			if sup {
				out.Suppressed += v[i]
				v[i] = 0
			}
			any = any || v[i] > 0
		}
		if !any {
			continue
		}
		cur := int32(0)
		addTo := func(dst []uint64, n int32) {
			for i := range v {
				dst[int(n)*nc+i] += v[i]
			}
		}
		addTo(vals, 0)
		for i, t := range tr.paths[s.ID] {
			k := at[t] - 1
			if k < 0 {
				k = int32(len(ns))
				at[t] = k + 1
				ns = append(ns, tnode{parent: cur, depth: ns[cur].depth + 1, trie: t, site: int32(s.ID), step: int32(i)})
				ns[cur].kids++
				vals = append(vals, zero...)
				self = append(self, zero...)
			}
			cur = k
			addTo(vals, cur)
		}
		addTo(self, cur)
	}
	// A node's share: its largest share of a cost's total.
	share := make([]float64, len(ns))
	for i := range ns {
		for c := 0; c < nc; c++ {
			if tot := vals[c]; tot > 0 {
				share[i] = max(share[i], float64(vals[i*nc+c])/float64(tot))
			}
		}
	}
	order := make([]int32, 0, len(ns))
	for i := range ns {
		if i == 0 || share[i] >= minShare && share[i] > 0 {
			order = append(order, int32(i))
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		sa, sb := share[order[a]], share[order[b]]
		if sa != sb {
			return sa > sb
		}
		return ns[order[a]].depth < ns[order[b]].depth
	})
	if maxNodes > 0 && len(order) > maxNodes {
		order = order[:maxNodes]
	}
	keep := make([]bool, len(ns))
	for _, i := range order {
		keep[i] = true
	}
	kids := make(map[int32][]int32, len(order))
	for i := int32(1); i < int32(len(ns)); i++ {
		if keep[i] {
			kids[ns[i].parent] = append(kids[ns[i].parent], i)
		}
	}
	out.Hidden = len(ns) - len(order)
	out.Nodes = make([]TreeNode, 0, len(order))
	name := func(i int32) string {
		if i == 0 {
			return "all"
		}
		return tr.nodes[ns[i].trie].name
	}
	var walk func(i int32, parent int)
	walk = func(i int32, parent int) {
		n := &ns[i]
		node := TreeNode{Name: name(i), Parent: parent, Depth: int(n.depth), Kids: int(n.kids),
			Values: vals[int(i)*nc : int(i+1)*nc : int(i+1)*nc], Self: self[int(i)*nc : int(i+1)*nc : int(i+1)*nc]}
		if i != 0 {
			f := tr.frame(x.sites[n.site], int(n.step))
			node.Module, node.File, node.Line = f.Module, f.File, f.Line
		}
		me := len(out.Nodes)
		out.Nodes = append(out.Nodes, node)
		ks := kids[i]
		sort.Slice(ks, func(a, b int) bool {
			va, vb := vals[int(ks[a])*nc+sortCol], vals[int(ks[b])*nc+sortCol]
			if va != vb {
				return va > vb
			}
			return name(ks[a]) < name(ks[b])
		})
		for _, k := range ks {
			walk(k, me)
		}
	}
	walk(0, -1)
	return out
}
