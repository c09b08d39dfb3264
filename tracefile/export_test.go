package tracefile

// DefsSections returns, for each chunk of the trace file at path in order,
// where its definitions section lies in the file: offset and length (0
// when it has none). For tests that damage them.
func DefsSections(path string) ([][2]int64, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out [][2]int64
	add := func(e indexEntry) error {
		out = append(out, [2]int64{e.off + chunkHeaderSize, int64(e.hdr.defsLen)})
		return nil
	}
	switch {
	case r.listed:
		for _, e := range r.list {
			add(e)
		}
	case r.indexN > 0:
		err = r.forIndex(add)
	default:
		err = r.walk(r.scanEnd, add, nil)
	}
	return out, err
}
