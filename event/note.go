package event

// A Note is a record that says something about the traced processes besides
// their heap events: a Warning, a Memory sample, the Verdict of a heap scan,
// the Census of an allocator's heap, or a process's Resident memory
// explained. It is one of the types below; a
// consumer switches on the type and ignores the kinds it has no use for.
type Note interface {
	// Of returns the process the note is about (0: the session) and when
	// it was taken (CLOCK_MONOTONIC ns).
	Of() (pid uint32, time int64)
	note()
}

// A Warning is something a session told its user: kept in the trace so that
// every reader of it (info, report, the page) shows it too, not only the
// terminal that started the session.
type Warning struct {
	PID  uint32 // the process it is about; 0 for the whole session
	Time int64
	// Code names the kind of warning in a few stable lowercase words
	// ("allocator-unseen", "stacks-cut"); readers may group by it.
	Code string
	Text string // one line, for people
}

// Memory is a sample of a process's resident memory, as the kernel counts
// it (/proc/PID/status): what the heap's figures are compared with.
type Memory struct {
	PID   uint32
	Time  int64
	RSS   uint64 // resident bytes: Anon + File + Shmem
	Anon  uint64 // resident anonymous memory (the heap, stacks, private mappings)
	File  uint64 // resident file-backed pages (code, data, mapped files)
	Shmem uint64 // resident shared memory
	Swap  uint64 // anonymous memory swapped out
}

// Class is the verdict of a reachability scan on one live block, as
// Memcheck and LeakSanitizer name them.
type Class uint8

// The reachability classes.
const (
	ClassUnknown   Class = iota // not classified: the scan could not decide (see its warnings)
	ClassDefinite               // definitely lost: no pointer to it or into it from the roots or a reachable block
	ClassIndirect               // indirectly lost: reachable only through lost blocks
	ClassPossible               // possibly lost: reachable only through pointers into its interior
	ClassReachable              // still reachable: a pointer to its start from the roots or a reachable block
	// NumClasses is the number of classes: arrays indexed by Class have
	// this length.
	NumClasses = iota
)

var classNames = names{"unknown", "definite", "indirect", "possible", "reachable"}

func (c Class) String() string {
	return classNames.format(uint8(c), "Class")
}

// Valid reports whether c is one of the classes above.
func (c Class) Valid() bool { return c < NumClasses }

// ParseClass parses a Class name: "unknown", "definite", "indirect",
// "possible" or "reachable".
func ParseClass(s string) (Class, error) {
	v, err := classNames.parse(s, "reachability class")
	return Class(v), err
}

// MarshalText implements encoding.TextMarshaler.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseClass.
func (c *Class) UnmarshalText(b []byte) (err error) {
	*c, err = ParseClass(string(b))
	return err
}

// Lost reports whether c is a leak in the narrow sense: definitely or
// indirectly lost.
func (c Class) Lost() bool { return c == ClassDefinite || c == ClassIndirect }

// Rules is the set of rules a scan classified by.
type Rules uint8

// The rules of the reachability scan.
const (
	RulesMemcheck Rules = iota // Valgrind Memcheck's: interior pointers make a block possibly lost
	RulesLSan                  // LeakSanitizer's: an interior pointer makes a block reachable
)

var ruleNames = names{"memcheck", "lsan"}

func (r Rules) String() string {
	return ruleNames.format(uint8(r), "Rules")
}

// MarshalText implements encoding.TextMarshaler.
func (r Rules) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseRules.
func (r *Rules) UnmarshalText(b []byte) (err error) {
	*r, err = ParseRules(string(b))
	return err
}

// BlockClass is the class of the live block at Addr.
type BlockClass struct {
	Addr  uint64
	Class Class
}

// A Verdict is the result of a reachability scan of a process's heap at
// Time: the class of every live block the scan knew of, by address. Blocks
// live at Time that it does not list were not scanned. What the scan could
// not read (roots, blocks) is said in Warnings beside it.
type Verdict struct {
	PID      uint32
	Time     int64
	Rules    Rules
	Pause    int64 // ns the process was stopped for the scan; 0 if it was not stopped by the scan
	Elapsed  int64 // ns the scan took
	Complete bool  // every root and block was read
	// Partial: the scan did not know every live block of the process
	// (those allocated before tracing began, or inherited across a fork),
	// so it scanned the heap's memory outside the blocks it knew as roots.
	// A block is then lost only if nothing at all points to it, and still
	// reachable may count a block held only by memory already freed.
	Partial bool
	// AtExit: the scan held the process on its way out, after its last
	// instruction (exit handlers and destructors run), before its memory
	// was released.
	AtExit bool
	Blocks []BlockClass
}

// HeapSpace is how an allocator's heap is used, in bytes, as a census found
// it. Fields a census cannot tell are 0.
type HeapSpace struct {
	Arenas        uint64 // arenas (glibc: the main arena and the others)
	InUse         uint64 // usable bytes of blocks in use
	InUseBlocks   uint64
	Overhead      uint64 // chunk headers, alignment and minimum sizes of the blocks in use
	FreeBins      uint64 // free chunks in the allocator's bins
	FreeFastbins  uint64 // free chunks in fastbins
	FreeTcache    uint64 // free chunks in the threads' caches
	Top           uint64 // the top chunks of the arenas: free, at the end of each heap
	Mmapped       uint64 // bytes of blocks the allocator mapped on their own (in InUse too)
	MmappedBlocks uint64
	Trimmable     uint64 // free bytes that malloc_trim could return to the system
	Corrupt       uint64 // chunks found damaged (their headers contradict the layout)
}

// A Census is what a process's heap held at Time, read from the process's
// memory rather than traced: every block in use (Stack 0: allocated before
// the trace saw it; Time 0: when is unknown) and how the heap's space is
// used. In a trace it is the rundown of an attach: the blocks live when
// tracing began.
type Census struct {
	PID    uint32
	Time   int64
	Heap   Heap  // the allocator read
	Pause  int64 // ns the process was stopped for the census
	Blocks []LiveBlock
	Space  HeapSpace
	// Groups say what the blocks are, as their contents tell without a
	// stack (see CensusGroup); BlockGroups, when not empty, has one entry
	// per block: the index in Groups of its group.
	Groups      []CensusGroup
	BlockGroups []uint32
}

func (w Warning) Of() (uint32, int64) { return w.PID, w.Time }
func (m Memory) Of() (uint32, int64)  { return m.PID, m.Time }
func (v Verdict) Of() (uint32, int64) { return v.PID, v.Time }
func (c Census) Of() (uint32, int64)  { return c.PID, c.Time }

func (Warning) note() {}
func (Memory) note()  {}
func (Verdict) note() {}
func (Census) note()  {}

// ParseRules parses a Rules name: "memcheck" or "lsan".
func ParseRules(s string) (Rules, error) {
	v, err := ruleNames.parse(s, "leak rules")
	return Rules(v), err
}
