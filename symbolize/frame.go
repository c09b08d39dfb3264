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
