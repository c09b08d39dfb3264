package report

import (
	"sort"

	"github.com/heapscope/heapscope/suppress"
)

// Suppressed is what one suppression rule took out of a report's leaks.
type Suppressed struct {
	Rule   *suppress.Rule
	Bytes  uint64
	Blocks uint64
	Sites  int
}

// Suppress matches the stack of every site that leaked against rules, in
// order, and moves the leaks of each site a rule matches from LiveBytes
// and LiveBlocks to SuppressedBytes and SuppressedBlocks: reports then
// list them as suppressed, with their totals, not as leaks. A site already
// suppressed stays so. The report's Suppressed list says what each rule took,
// largest first.
func (r *Report) Suppress(rules []*suppress.Rule, o suppress.Options) {
	if len(rules) == 0 {
		return
	}
	m := suppress.NewMatcher(rules, o)
	by := map[*suppress.Rule]*Suppressed{}
	for _, s := range r.Suppressed {
		by[s.Rule] = s
	}
	for _, s := range r.Sites {
		if s.LiveBlocks == 0 || s.SuppressedBy != nil {
			continue
		}
		rule := m.Match(s.Stack())
		if rule == nil {
			continue
		}
		s.SuppressedBy = rule
		s.SuppressedBytes, s.SuppressedBlocks = s.LiveBytes, s.LiveBlocks
		s.LiveBytes, s.LiveBlocks = 0, 0
		s.SuppressedClasses, s.Classes = s.Classes, s.SuppressedClasses
		sp := by[rule]
		if sp == nil {
			sp = &Suppressed{Rule: rule}
			by[rule] = sp
			r.Suppressed = append(r.Suppressed, sp)
		}
		sp.Bytes += s.SuppressedBytes
		sp.Blocks += s.SuppressedBlocks
		sp.Sites++
	}
	sort.SliceStable(r.Suppressed, func(i, j int) bool { return r.Suppressed[i].Bytes > r.Suppressed[j].Bytes })
}

// SuppressedTotal returns the bytes and blocks the rules suppressed, and
// how many rules matched.
func (r *Report) SuppressedTotal() (bytes, blocks uint64, rules int) {
	for _, s := range r.Suppressed {
		bytes += s.Bytes
		blocks += s.Blocks
	}
	return bytes, blocks, len(r.Suppressed)
}

// Leaked returns the bytes and blocks leaked, those suppressed left out.
func (r *Report) Leaked() (bytes, blocks uint64) {
	sb, sk, _ := r.SuppressedTotal()
	s := r.Profile.Summary
	return s.LiveBytes - min(sb, s.LiveBytes), s.LiveBlocks - min(sk, s.LiveBlocks)
}
