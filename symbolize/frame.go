// Package symbolize turns addresses in traced processes into functions,
// source files and lines, from ELF symbols and DWARF, offline, from a trace's
// module records.
//
// A Symbolizer is given the module records of each process (AddModule) and
// resolves return addresses to frames (Frames), innermost first, with the
// calls inlined at the address. It reads:
//
//   - .symtab and .dynsym, for names where there is no DWARF;
//   - DWARF line tables and the trees of inlined calls, compressed or not
//     (zlib, zstd), DWARF 4 and 5, one compilation unit and one function at
//     a time as addresses fall in them;
//   - separate debug files, by build-id under each debug root
//     (ROOT/.build-id/xx/yyyy.debug, as Debian's -dbg packages install them)
//     and by .gnu_debuglink.
//
// A module record names its file and build-id. A file whose build-id is not
// the record's is another build and is not used: its debug file, found by
// the record's build-id, is used alone if it can be found, and Warnings says
// so either way. C++ and Rust (legacy and v0) names are demangled.
//
// Nothing a file holds can make the Symbolizer panic or lose a frame: what it
// cannot read is a warning, and an address it cannot resolve is a frame with
// its module and offset, or its address alone.
package symbolize

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
