package event

// A CensusGroup is a kind of block a census found: blocks of one size class
// that hold the same thing, as far as their contents tell without a stack.
type CensusGroup struct {
	// Lo and Hi bound the chunk sizes of the group's size class, [Lo, Hi):
	// the allocator's (glibc's: 16 bytes apart below 1 KiB, its large
	// bins, then powers of two), header included.
	Lo, Hi uint64
	// Name is what the blocks are: a C++ class (by the vtable their first
	// word points at), "string" (they start with printable text), the
	// allocator's own ("glibc: tcache"), or "" when nothing tells.
	Name string
	// Example is the address of one of the blocks; Text, for strings,
	// what it says.
	Example uint64
	Text    string
	// HeldBy is who holds most of the group's blocks, when a heap scan
	// told: "a 65536 B block (Cache)", "stack of thread 42"; Held is how
	// many of them.
	HeldBy string
	Held   uint64
}

// Resident is a process's resident memory explained at Time: the RSS and
// PSS of its mappings (/proc/PID/smaps) split into parts by what a census
// of its heap found in them. The parts add up to RSS and PSS.
type Resident struct {
	PID  uint32
	Time int64
	// RSS, PSS and Swap are smaps' counters summed over every mapping;
	// Rollup is smaps_rollup's RSS, read at the same moment.
	RSS, PSS, Swap, Rollup uint64
	// Trimmable estimates the resident bytes malloc_trim(0) would give
	// back. Disagreement is by how much the pages counted in the heap's
	// mappings exceeded smaps' count of them (0 when the parts are exact).
	Trimmable, Disagreement uint64
	// ZeroPagesKnown says whether pages never written (the kernel's zero
	// page) could be told from resident memory.
	ZeroPagesKnown bool
	Parts          []ResidentPart
}

// ResidentPart is one part of a process's resident memory.
type ResidentPart struct {
	Name string // "heap in use", "allocator overhead", "free, in bins", ..., "file-backed, clean or shared"
	// RSS and PSS are the part's resident bytes and proportional share;
	// Bytes what the census counts in it, resident or not (0 for parts
	// that are not the heap's).
	RSS, PSS, Bytes uint64
	// Measured says whether RSS was counted page by page or estimated;
	// How says how.
	Measured bool
	How      string
}

// Of implements Note.
func (r Resident) Of() (uint32, int64) { return r.PID, r.Time }

func (Resident) note() {}
