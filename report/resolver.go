package report

import "github.com/heapscope/heapscope/symbolize"

// Resolver returns the resolver that symbolized r's stacks, for a caller
// that keeps the stacks' addresses and wants the same frames for them (the
// query index, which answers windows from the report's pass). For a report
// of Load, it answers from the frames found then: the symbolizer is closed
// and gone.
func (r *Report) Resolver() Resolver { return r.resolver }

// tableResolver answers from a symTable: every address of a report's
// stacks, symbolized once, by process. An address it does not hold is its
// module and offset, as a resolver of module records alone gives it.
type tableResolver struct {
	t    *symTable
	mods moduleResolver
}

func (r tableResolver) Frames(pid uint32, addr uint64) []symbolize.Frame {
	ids, ok := r.t.addrs[pidAddr{pid, addr}]
	if !ok {
		return r.mods.Frames(pid, addr)
	}
	out := make([]symbolize.Frame, len(ids))
	for i, id := range ids {
		out[i] = r.t.table.frames[id]
	}
	return out
}
