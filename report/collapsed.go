package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// WriteCollapsed writes the sites as collapsed stacks, the input of
// flamegraph.pl and speedscope: one line per distinct stack, its frames
// from the root to the innermost joined by ';', a space and the metric's
// value. Sites whose value is 0 are left out. Semicolons inside names become
// ':'. A site without a stack is "[no stack]".
func (r *Report) WriteCollapsed(w io.Writer, m Metric) error {
	if m.missing(r.Profile) {
		if m.classes() {
			return fmt.Errorf("this trace has no %s data: it holds no leak check (heapscope run checks at exit unless --no-leak-check; heapscope leaks checks a running session)", m)
		}
		return fmt.Errorf("this trace has no %s data: %s", m, r.Profile.Missing)
	}
	clean := strings.NewReplacer(";", ":", "\n", " ")
	sums := map[string]uint64{}
	var b strings.Builder
	for _, s := range r.Sites {
		v := m.of(&s.Counters)
		if v == 0 {
			continue
		}
		b.Reset()
		if s.depth() == 0 {
			b.WriteString("[no stack]")
		}
		for i := s.depth() - 1; i >= 0; i-- {
			if i != s.depth()-1 {
				b.WriteByte(';')
			}
			b.WriteString(clean.Replace(s.table.name(s.ids[i])))
		}
		// Sites differing only in file or line collapse to the same names.
		sums[b.String()] += v
	}
	lines := make([]string, 0, len(sums))
	for k := range sums {
		lines = append(lines, k)
	}
	sort.Strings(lines)
	bw := bufio.NewWriter(w)
	for _, l := range lines {
		bw.WriteString(l)
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatUint(sums[l], 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
