package query

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/heapscope/heapscope/symbolize"
)

// Field is the part of a frame a Term looks at.
type Field uint8

// The fields of a frame a term matches.
const (
	FieldFunction Field = iota // the frame's name, as symbolize.Frame.Name writes it (module+offset without a function)
	FieldModule                // the path of its module
	FieldFile                  // its source file
	numFields
)

var fieldNames = [numFields]string{"function", "module", "file"}

func (f Field) String() string {
	if f < numFields {
		return fieldNames[f]
	}
	return fmt.Sprintf("field(%d)", uint8(f))
}

// A Term matches a frame whose Field holds Text, ignoring case.
type Term struct {
	Field Field
	Text  string
}

// ErrBadTerm is returned for a term that cannot be matched.
var ErrBadTerm = errors.New("query: bad filter term")

// ParseTerm parses "TEXT" (a function), "function:TEXT", "module:TEXT" or
// "file:TEXT".
func ParseTerm(s string) (Term, error) {
	t := Term{Field: FieldFunction, Text: s}
	if k, v, ok := strings.Cut(s, ":"); ok {
		for i, n := range fieldNames {
			if k == n {
				t = Term{Field: Field(i), Text: v}
			}
		}
	}
	if t.Text == "" {
		return Term{}, fmt.Errorf("%w %q: empty", ErrBadTerm, s)
	}
	if strings.ContainsFunc(t.Text, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Term{}, fmt.Errorf("%w %q: a control character", ErrBadTerm, s)
	}
	return t, nil
}

func (t Term) String() string { return t.Field.String() + ":" + t.Text }

// matches reports whether t matches f; text is t.Text in lower case.
func (t Term) matches(f *symbolize.Frame, text string) bool {
	var s string
	switch t.Field {
	case FieldFunction:
		s = f.Name()
	case FieldModule:
		s = f.Module
	case FieldFile:
		s = f.File
	}
	return s != "" && strings.Contains(strings.ToLower(s), text)
}

// A Match selects call sites by their frames, as heaptrack's filters do: a
// site is kept when each Include term matches a frame of its stack and no
// Exclude term matches any. The zero Match keeps every site. A site
// without a stack has one frame, named "[no stack]".
type Match struct {
	Include, Exclude []Term
}

// IsZero reports whether m keeps every site.
func (m Match) IsZero() bool { return len(m.Include) == 0 && len(m.Exclude) == 0 }

// String writes m as Filter.Match holds it: "+term" and "-term", one a
// line. ParseMatch reads it back.
func (m Match) String() string {
	var b strings.Builder
	for _, t := range m.Include {
		b.WriteString("+" + t.String() + "\n")
	}
	for _, t := range m.Exclude {
		b.WriteString("-" + t.String() + "\n")
	}
	return b.String()
}

// ParseMatch reads what Match.String wrote.
func ParseMatch(s string) (Match, error) {
	var m Match
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" {
			continue
		}
		t, err := ParseTerm(line[1:])
		if err != nil {
			return Match{}, err
		}
		switch line[0] {
		case '+':
			m.Include = append(m.Include, t)
		case '-':
			m.Exclude = append(m.Exclude, t)
		default:
			return Match{}, fmt.Errorf("%w %q: want + or - first", ErrBadTerm, line)
		}
	}
	return m, nil
}

// Keeps reports whether m keeps a site whose stack is frames (innermost
// first).
func (m Match) Keeps(frames []symbolize.Frame) bool {
	if len(frames) == 0 {
		frames = []symbolize.Frame{noStack}
	}
	any := func(t Term) bool {
		text := strings.ToLower(t.Text)
		for i := range frames {
			if t.matches(&frames[i], text) {
				return true
			}
		}
		return false
	}
	for _, t := range m.Include {
		if !any(t) {
			return false
		}
	}
	for _, t := range m.Exclude {
		if any(t) {
			return false
		}
	}
	return true
}

// maskCacheLen is how many sites masks an Index keeps: the page asks
// several questions of one filter at once.
const maskCacheLen = 8

// masks remembers the sites masks of the latest matches asked.
type masks struct {
	mu   sync.Mutex
	keys []string
	vals [][]bool
}

// siteMask returns, by site, whether the match spec (Filter.Match) keeps
// it; nil for "" (every site). A spec that does not parse keeps no site:
// a Filter's Match is made by Match.String.
func (x *Index) siteMask(spec string) []bool {
	if spec == "" {
		return nil
	}
	c := &x.masks
	c.mu.Lock()
	for i, k := range c.keys {
		if k == spec {
			v := c.vals[i]
			c.mu.Unlock()
			return v
		}
	}
	c.mu.Unlock()
	mask := make([]bool, len(x.sites))
	if m, err := ParseMatch(spec); err == nil {
		for _, s := range x.sites {
			mask[s.ID] = m.Keeps(s.Frames)
		}
	}
	c.mu.Lock()
	if len(c.keys) == maskCacheLen {
		c.keys, c.vals = c.keys[1:], c.vals[1:]
	}
	c.keys, c.vals = append(c.keys, spec), append(c.vals, mask)
	c.mu.Unlock()
	return mask
}

// MatchCost returns what the sites whose frames a Match (as its String
// writes it) keeps cost in res by c, each site once, and what every site
// costs: a search's share. What SiteCost suppresses counts in neither,
// as in Flame.
func (x *Index) MatchCost(res *Result, c Cost, spec string) (matched, total uint64) {
	mask := x.siteMask(spec)
	for _, s := range x.sites {
		v, sup := x.SiteCost(res, c, s.ID)
		if v == 0 || sup {
			continue
		}
		total += v
		if mask == nil || mask[s.ID] {
			matched += v
		}
	}
	return matched, total
}
