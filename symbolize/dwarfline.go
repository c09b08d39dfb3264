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
	h, err := r.header(addrSize)
	if err != nil {
		return nil, nil, err
	}
	dirs, files := r.fileNames(h.version, compDir, strs)
	if r.err != nil {
		return nil, nil, fmt.Errorf("line table header: %w", r.err)
	}
	r.i = h.program
	m := lineMachine{r: r, h: &h, dirs: dirs, files: files}
	m.run()
	sortRows(m.rows)
	if r.err != nil {
		err = fmt.Errorf("line table: %w", r.err)
	}
	return m.files, m.rows, err
}

// lineHeader is what the program of a line table needs of its header.
type lineHeader struct {
	version   int
	addrSize  int
	program   int // index of the program in the reader's bytes
	minInst   int
	maxOps    int
	lineBase  int
	lineRange int
	opBase    int
	opLens    []int // operand counts of the standard opcodes, by opcode
}

// header reads a line table's header up to its directory and file tables,
// and limits r to the table. addrSize is the unit's, which DWARF 5 tables
// repeat.
func (r *lineReader) header(addrSize int) (lineHeader, error) {
	var h lineHeader
	length := r.fixed(4)
	if length == 0xffffffff {
		r.dwarf64, length = true, r.fixed(8)
	}
	if r.err != nil || length > uint64(len(r.b)-r.i) {
		return h, errors.New("line table: bad length")
	}
	r.b = r.b[:r.i+int(length)]
	h.version = int(r.fixed(2))
	if r.err == nil && (h.version < 2 || h.version > 5) {
		return h, fmt.Errorf("line table: unknown version %d", h.version)
	}
	h.addrSize = addrSize
	if h.version >= 5 {
		h.addrSize = int(r.u8())
		r.u8() // segment selector size
	}
	hlen := r.offset()
	if r.err != nil || hlen > uint64(len(r.b)-r.i) {
		return h, errors.New("line table: bad header length")
	}
	h.program = r.i + int(hlen)
	h.minInst = int(r.u8())
	h.maxOps = 1
	if h.version >= 4 {
		h.maxOps = int(r.u8())
	}
	r.u8() // default_is_stmt: every row is taken
	h.lineBase = int(int8(r.u8()))
	h.lineRange = int(r.u8())
	h.opBase = int(r.u8())
	if r.err != nil {
		return h, fmt.Errorf("line table header: %w", r.err)
	}
	if h.maxOps == 0 || h.lineRange == 0 {
		return h, errors.New("line table header: zero operations per instruction or line range")
	}
	h.opLens = make([]int, max(h.opBase, 1))
	for op := 1; op < h.opBase; op++ {
		h.opLens[op] = int(r.u8())
		if op < len(knownOpcodeLengths) && h.opLens[op] != knownOpcodeLengths[op] && r.err == nil {
			return h, fmt.Errorf("line table header: opcode %d has %d operands", op, h.opLens[op])
		}
	}
	if h.addrSize != 4 && h.addrSize != 8 {
		return h, fmt.Errorf("line table header: address size %d", h.addrSize)
	}
	return h, nil
}

// fileNames reads the directory and file tables of a line table header.
func (r *lineReader) fileNames(version int, compDir string, strs lineStrings) (dirs, files []string) {
	if version >= 5 {
		dirs = r.entries(nil, strs)
		return dirs, r.entries(dirs, strs)
	}
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
	return dirs, files
}

// lineMachine runs a line program: its registers, and the rows and files
// it has made.
type lineMachine struct {
	r     *lineReader
	h     *lineHeader
	dirs  []string
	files []string
	rows  []lineRow

	addr    uint64
	opIndex int
	file    int
	line    int
}

func (m *lineMachine) reset() { m.addr, m.opIndex, m.file, m.line = 0, 0, 1, 1 }

// advance moves the address by n operations.
func (m *lineMachine) advance(n int) {
	m.opIndex += n
	m.addr += uint64(m.h.minInst * (m.opIndex / m.h.maxOps))
	m.opIndex %= m.h.maxOps
}

// emit appends a row from the registers.
func (m *lineMachine) emit(end bool) {
	f := int32(-1)
	if m.file >= 0 && m.file < len(m.files) {
		f = int32(m.file)
	}
	m.rows = append(m.rows, lineRow{addr: m.addr, line: int32(m.line), file: f, end: end})
}

// run decodes the program from the reader's index to the table's end, or
// to the first error.
func (m *lineMachine) run() {
	r, h := m.r, m.h
	m.reset()
	for r.err == nil && r.i < len(r.b) {
		op := int(r.u8())
		if op >= h.opBase {
			adj := op - h.opBase
			m.advance(adj / h.lineRange)
			m.line += h.lineBase + adj%h.lineRange
			m.emit(false)
			continue
		}
		switch op {
		case 0:
			m.extended()
		case lnsCopy:
			m.emit(false)
		case lnsAdvancePC:
			m.advance(int(r.uleb()))
		case lnsAdvanceLine:
			m.line += int(r.sleb())
		case lnsSetFile:
			m.file = int(r.uleb())
		case lnsSetColumn, lnsSetISA:
			r.uleb()
		case lnsNegateStmt, lnsSetBasicBlock, lnsSetPrologueEnd, lnsSetEpilogueBegin:
		case lnsConstAddPC:
			m.advance((255 - h.opBase) / h.lineRange)
		case lnsFixedAdvancePC:
			m.addr += r.fixed(2)
		default:
			for k := 0; k < h.opLens[op]; k++ {
				r.uleb()
			}
		}
	}
}

// extended decodes an extended opcode, after its 0 byte.
func (m *lineMachine) extended() {
	r := m.r
	n := r.uleb()
	start := r.i
	if r.err != nil || n > uint64(len(r.b)-start) || n == 0 {
		r.fail(errors.New("bad extended opcode length"))
		return
	}
	switch r.u8() {
	case lneEndSequence:
		m.emit(true)
		m.reset()
	case lneSetAddress:
		if n-1 >= uint64(m.h.addrSize) {
			m.addr, m.opIndex = r.fixed(m.h.addrSize), 0
		}
	case lneDefineFile:
		name, done := r.fileEntry(m.dirs)
		if done {
			r.fail(errors.New("bad DW_LNE_define_file"))
		}
		m.files = append(m.files, name)
	case lneSetDiscriminator:
		r.uleb()
	}
	r.i = start + int(n)
}

// sortRows sorts rows by address. Sequences may come in any order; within
// one, addresses only grow. At an address where one sequence ends and
// another begins, the end sorts first so that the beginning wins.
func sortRows(rows []lineRow) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		return a.end && !b.end
	})
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
