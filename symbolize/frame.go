package symbolize

import (
	"path"
	"strconv"
	"strings"
)

// Frame is one resolved frame of a stack. One address can give several
// frames when functions were inlined into one another: the innermost first,
// with Inlined set on all but the last.
type Frame struct {
	Function string // demangled name; "" when unknown
	File     string // source file; "" when unknown
	Line     int    // 0 when unknown
	Module   string // path of the mapped file; "" when the address is in no known module
	Offset   uint64 // the address's offset in Module's file
	Address  uint64 // the address in the process
	Inlined  bool   // inlined into the next frame
}

// Name is how the frame is named where one word is needed: its function,
// else its module's base name and the offset ("libsqlite3.so.0+0xa7504"),
// else its address ("0x7f3a4c201136").
func (f *Frame) Name() string {
	switch {
	case f.Function != "":
		return f.Function
	case f.Module != "":
		return path.Base(f.Module) + "+0x" + strconv.FormatUint(f.Offset, 16)
	}
	return "0x" + strconv.FormatUint(f.Address, 16)
}

// A FrameKey identifies a frame: two frames with the same key are the same
// code. Stacks whose frames have the same keys are one site (see SiteKey).
type FrameKey struct {
	function, file, module string
	line                   int
	offset, address        uint64
	inlined                bool
}

// Key is what a reader of one trace sees of the frame: its function, file,
// line, module and inlining; the module and offset for a frame without a
// function; the address only for a frame without a module. Addresses are
// otherwise left out, so that the same code in several processes is the
// same frame.
func (f *Frame) Key() FrameKey {
	k := FrameKey{function: f.Function, file: f.File, module: f.Module, line: f.Line, inlined: f.Inlined}
	switch {
	case f.Function != "":
	case f.Module != "":
		k.offset = f.Offset
	default:
		k.address = f.Address
	}
	return k
}

// DiffKey is what matches the frame with one of another trace (heapscope
// diff): its function, file, line and inlining, without its module, and
// for a frame without a function the module's base name and offset. Two
// runs of one binary (ASLR), two builds of it at other paths, and traces of
// either provider then match.
func (f *Frame) DiffKey() FrameKey {
	k := FrameKey{function: f.Function, file: f.File, line: f.Line, inlined: f.Inlined}
	switch {
	case f.Function != "":
	case f.Module != "":
		k.module, k.offset = path.Base(f.Module), f.Offset
	default:
		k.address = f.Address
	}
	return k
}

// SiteKey identifies a site: the stack of frames, innermost first, by their
// Keys. It is a string, to key maps.
func SiteKey(frames []Frame) string { return siteKey(frames, (*Frame).Key) }

// DiffSiteKey identifies a site across traces: its frames by their
// DiffKeys.
func DiffSiteKey(frames []Frame) string { return siteKey(frames, (*Frame).DiffKey) }

func siteKey(frames []Frame, key func(*Frame) FrameKey) string {
	var b strings.Builder
	for i := range frames {
		k := key(&frames[i])
		b.WriteString(k.function)
		b.WriteByte(0)
		b.WriteString(k.file)
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(k.line))
		b.WriteByte(0)
		b.WriteString(k.module)
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(k.offset, 16))
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(k.address, 16))
		if k.inlined {
			b.WriteByte('i')
		}
		b.WriteByte(1)
	}
	return b.String()
}
