package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"sort"
)

// lineRow is a row of a line table.
type lineRow struct {
	addr uint64
	line int32
	file int32 // index into the unit's files; -1 for none
	end  bool  // end of a sequence: no line from here on
}

// Standard opcodes, and the extended ones, of line programs.
const (
	lnsCopy             = 1
	lnsAdvancePC        = 2
	lnsAdvanceLine      = 3
	lnsSetFile          = 4
	lnsSetColumn        = 5
	lnsNegateStmt       = 6
	lnsSetBasicBlock    = 7
	lnsConstAddPC       = 8
	lnsFixedAdvancePC   = 9
	lnsSetPrologueEnd   = 10
	lnsSetEpilogueBegin = 11
	lnsSetISA           = 12

	lneEndSequence      = 1
	lneSetAddress       = 2
	lneDefineFile       = 3
	lneSetDiscriminator = 4

	lnctPath           = 1
	lnctDirectoryIndex = 2
)

// knownOpcodeLengths are the operand counts of the standard opcodes: a
// table that says otherwise is corrupt.
var knownOpcodeLengths = [...]int{lnsCopy: 0, lnsAdvancePC: 1, lnsAdvanceLine: 1, lnsSetFile: 1, lnsSetColumn: 1,
	lnsNegateStmt: 0, lnsSetBasicBlock: 0, lnsConstAddPC: 0, lnsFixedAdvancePC: 1, lnsSetPrologueEnd: 0,
	lnsSetEpilogueBegin: 0, lnsSetISA: 1}

// lineStrings resolves the string forms a line table header uses.
type lineStrings interface {
	strp(off uint64) (string, error)     // .debug_str
	lineStrp(off uint64) (string, error) // .debug_line_str
}

// lineReader reads one line table.
type lineReader struct {
	b       []byte
	i       int
	order   binary.ByteOrder
	dwarf64 bool
	err     error
}

func (r *lineReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *lineReader) fixed(n int) uint64 {
	if r.err != nil || r.i+n > len(r.b) {
		r.fail(errShort)
		return 0
	}
	v := uint64(0)
	if n <= 8 {
		v = readUint(r.order, r.b[r.i:], n)
	}
	r.i += n
	return v
}

func (r *lineReader) u8() uint64 { return r.fixed(1) }

func (r *lineReader) uleb() uint64 {
	if r.err != nil {
		return 0
	}
	v, i, err := uleb(r.b, r.i)
	r.i = i
	r.fail(err)
	return v
}

func (r *lineReader) sleb() int64 {
	if r.err != nil {
		return 0
	}
	v, i, err := sleb(r.b, r.i)
	r.i = i
	r.fail(err)
	return v
}

func (r *lineReader) offset() uint64 {
	if r.dwarf64 {
		return r.fixed(8)
	}
	return r.fixed(4)
}

func (r *lineReader) cstring() string {
	if r.err != nil {
		return ""
	}
	for j := r.i; j < len(r.b); j++ {
		if r.b[j] == 0 {
			s := string(r.b[r.i:j])
			r.i = j + 1
			return s
		}
	}
	r.fail(errShort)
	return ""
}

// parseLines decodes the line table b (its whole unit) of a unit whose
// addresses are addrSize bytes and whose compilation directory is compDir.
// It returns the file names, indexed as the table's file numbers are (from
// 1 before DWARF 5, from 0 since), and the rows, sorted by address; on an
// error, the rows read before it.
//
// File names are made as package debug/dwarf makes them: a relative name
// joined to its directory, and before DWARF 5 a relative directory joined
// to compDir.
func parseLines(b []byte, order binary.ByteOrder, addrSize int, compDir string, strs lineStrings) (files []string, rows []lineRow, err error) {
	r := &lineReader{b: b, order: order}
	length := r.fixed(4)
	if length == 0xffffffff {
		r.dwarf64, length = true, r.fixed(8)
	}
	if r.err != nil || length > uint64(len(b)-r.i) {
		return nil, nil, errors.New("line table: bad length")
	}
	r.b = b[:r.i+int(length)]
	version := r.fixed(2)
	if r.err == nil && (version < 2 || version > 5) {
		return nil, nil, fmt.Errorf("line table: unknown version %d", version)
	}
	if version >= 5 {
		addrSize = int(r.u8())
		r.u8() // segment selector size
	}
	hlen := r.offset()
	if r.err != nil || hlen > uint64(len(r.b)-r.i) {
		return nil, nil, errors.New("line table: bad header length")
	}
	program := r.i + int(hlen)
	minInst := int(r.u8())
	maxOps := 1
	if version >= 4 {
		maxOps = int(r.u8())
	}
	defaultStmt := r.u8() != 0
	_ = defaultStmt
	lineBase := int(int8(r.u8()))
	lineRange := int(r.u8())
	opBase := int(r.u8())
	if r.err != nil {
		return nil, nil, fmt.Errorf("line table header: %w", r.err)
	}
	if maxOps == 0 || lineRange == 0 {
		return nil, nil, errors.New("line table header: zero operations per instruction or line range")
	}
	opLens := make([]int, max(opBase, 1))
	for op := 1; op < opBase; op++ {
		opLens[op] = int(r.u8())
		if op < len(knownOpcodeLengths) && opLens[op] != knownOpcodeLengths[op] && r.err == nil {
			return nil, nil, fmt.Errorf("line table header: opcode %d has %d operands", op, opLens[op])
		}
	}
	if addrSize != 4 && addrSize != 8 {
		return nil, nil, fmt.Errorf("line table header: address size %d", addrSize)
	}

	var dirs []string
	if version < 5 {
		dirs = append(dirs, compDir)
		for {
			d := r.cstring()
			if r.err != nil || d == "" {
				break
			}
			if !isAbs(d) {
				d = joinPath(compDir, d)
			}
			dirs = append(dirs, d)
		}
		files = append(files, "") // file numbers start at 1
		for r.err == nil {
			name, done := r.fileEntry(dirs)
			if done {
				break
			}
			files = append(files, name)
		}
	} else {
		dirs = r.entries(nil, strs)
		files = r.entries(dirs, strs)
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("line table header: %w", r.err)
	}

	// The program. Its state: the registers rows are made of.
	r.i = program
	var addr uint64
	var opIndex int
	file, line := 1, 1
	reset := func() { addr, opIndex, file, line = 0, 0, 1, 1 }
	advance := func(n int) {
		opIndex += n
		addr += uint64(minInst * (opIndex / maxOps))
		opIndex %= maxOps
	}
	emit := func(end bool) {
		f := int32(-1)
		if file >= 0 && file < len(files) {
			f = int32(file)
		}
		rows = append(rows, lineRow{addr: addr, line: int32(line), file: f, end: end})
	}
	for r.err == nil && r.i < len(r.b) {
		op := int(r.u8())
		if op >= opBase {
			adj := op - opBase
			advance(adj / lineRange)
			line += lineBase + adj%lineRange
			emit(false)
			continue
		}
		switch op {
		case 0:
			n := r.uleb()
			start := r.i
			if r.err != nil || n > uint64(len(r.b)-start) || n == 0 {
				r.fail(errors.New("bad extended opcode length"))
				break
			}
			switch r.u8() {
			case lneEndSequence:
				emit(true)
				reset()
			case lneSetAddress:
				if n-1 >= uint64(addrSize) {
					addr, opIndex = r.fixed(addrSize), 0
				}
			case lneDefineFile:
				name, done := r.fileEntry(dirs)
				if done {
					r.fail(errors.New("bad DW_LNE_define_file"))
				}
				files = append(files, name)
			case lneSetDiscriminator:
				r.uleb()
			}
			r.i = start + int(n)
		case lnsCopy:
			emit(false)
		case lnsAdvancePC:
			advance(int(r.uleb()))
		case lnsAdvanceLine:
			line += int(r.sleb())
		case lnsSetFile:
			file = int(r.uleb())
		case lnsSetColumn, lnsSetISA:
			r.uleb()
		case lnsNegateStmt, lnsSetBasicBlock, lnsSetPrologueEnd, lnsSetEpilogueBegin:
		case lnsConstAddPC:
			advance((255 - opBase) / lineRange)
		case lnsFixedAdvancePC:
			addr += r.fixed(2)
		default:
			for k := 0; k < opLens[op]; k++ {
				r.uleb()
			}
		}
	}
	// Sequences may come in any order; within one, addresses only grow. At
	// an address where one sequence ends and another begins, the end sorts
	// first so that the beginning wins.
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		return a.end && !b.end
	})
	if r.err != nil {
		err = fmt.Errorf("line table: %w", r.err)
	}
	return files, rows, err
}

// fileEntry reads a file entry of a table before DWARF 5; done at the
// empty name that ends the list.
func (r *lineReader) fileEntry(dirs []string) (name string, done bool) {
	name = r.cstring()
	if r.err != nil || name == "" {
		return "", true
	}
	dir := r.uleb()
	if !isAbs(name) {
		if dir >= uint64(len(dirs)) {
			r.fail(errors.New("directory index out of range"))
			return "", true
		}
		name = joinPath(dirs[dir], name)
	}
	r.uleb() // modification time
	r.uleb() // length
	return name, false
}

// entries reads a DWARF 5 directory or file name table: its format, then
// its entries. dirs are the directories file names refer to.
func (r *lineReader) entries(dirs []string, strs lineStrings) []string {
	type lnctForm struct{ lnct, form uint64 }
	nf := int(r.u8())
	format := make([]lnctForm, 0, nf)
	for k := 0; k < nf && r.err == nil; k++ {
		format = append(format, lnctForm{r.uleb(), r.uleb()})
	}
	n := r.uleb()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail(errors.New("bad entry count"))
		return nil
	}
	out := make([]string, 0, n)
	for k := uint64(0); k < n && r.err == nil; k++ {
		var name, dir string
		for _, f := range format {
			var s string
			var v uint64
			var err error
			switch f.form {
			case formString:
				s = r.cstring()
			case formStrp, formLineStrp:
				off := r.offset()
				if r.err != nil {
					break
				}
				if f.form == formStrp {
					s, err = strs.strp(off)
				} else {
					s, err = strs.lineStrp(off)
				}
				r.fail(err)
			case formStrpSup:
				r.offset()
			case formStrx, formUdata:
				v = r.uleb()
			case formStrx1, formData1:
				v = r.fixed(1)
			case formStrx2, formData2:
				v = r.fixed(2)
			case formStrx3:
				r.fixed(3)
			case formStrx4, formData4:
				v = r.fixed(4)
			case formData8:
				v = r.fixed(8)
			case formData16:
				r.fixed(16)
			case formBlock:
				l := r.uleb()
				if l > uint64(len(r.b)-r.i) {
					r.fail(errShort)
					break
				}
				r.i += int(l)
			default:
				r.fail(fmt.Errorf("unknown form %#x in a line table header", f.form))
			}
			switch f.lnct {
			case lnctPath:
				name = s
			case lnctDirectoryIndex:
				if v >= uint64(len(dirs)) {
					r.fail(errors.New("directory index out of range"))
					break
				}
				dir = dirs[v]
			}
		}
		if dir != "" && name != "" && !isAbs(name) {
			name = joinPath(dir, name)
		}
		out = append(out, name)
	}
	return out
}

func isAbs(p string) bool { return len(p) > 0 && p[0] == '/' }

// joinPath joins a directory and a relative name, as debug/dwarf does for
// Unix paths.
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return path.Join(dir, name)
}
