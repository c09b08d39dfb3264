package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Errors. Each is wrapped with context; test with errors.Is.
var (
	// ErrBadCFI: the call frame information cannot be parsed.
	ErrBadCFI = errors.New("unwind: malformed call frame information")
	// ErrNoCFI: the file has neither .eh_frame nor .debug_frame.
	ErrNoCFI = errors.New("unwind: no call frame information")
	// ErrUnsupported: not an x86-64 ELF file, or its code spans more than 4 GiB.
	ErrUnsupported = errors.New("unwind: unsupported file")
	// ErrBadTable: a serialized table is malformed.
	ErrBadTable = errors.New("unwind: malformed table")
)

// Kind says how an entry finds the caller's frame.
type Kind uint8

// Entry kinds. The values are part of the format (FORMAT.md).
const (
	// KindFallback: no rule here (no FDE covers the address, or its rule
	// does not fit an entry): the consumer falls back (frame pointer,
	// libunwind).
	KindFallback Kind = 0
	// KindRSP: CFA = RSP + CFAOffset.
	KindRSP Kind = 1
	// KindRBP: CFA = RBP + CFAOffset.
	KindRBP Kind = 2
	// KindPLT: CFA = RSP + CFAOffset + ((RIP&15) >= Aux ? 8 : 0), the
	// DW_CFA_def_cfa_expression of a lazy-binding .plt.
	KindPLT Kind = 3
	// KindEnd: the outermost frame (return address undefined): the stack
	// ends here.
	KindEnd Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindFallback:
		return "fallback"
	case KindRSP:
		return "rsp"
	case KindRBP:
		return "rbp"
	case KindPLT:
		return "plt"
	case KindEnd:
		return "end"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// EntrySize is the size of an encoded entry in bytes.
const EntrySize = 8

// Entry is one row of a table: the rule for the addresses from Addr (the
// file's virtual address minus the table's Base) up to the next entry's
// Addr. Encoded little-endian as {u32 Addr, u16 CFAOffset, u8 Kind, u8 Aux}.
type Entry struct {
	Addr      uint32
	CFAOffset uint16
	Kind      Kind
	// Aux: for KindRSP and KindRBP, int8(Aux)*8 is where the caller's RBP
	// was saved relative to the CFA (0: RBP is unchanged); for KindPLT, the
	// RIP&15 threshold; otherwise 0.
	Aux uint8
}

// RBPOffset is the CFA-relative offset where the caller's RBP is saved, or
// 0 when RBP is unchanged (KindRSP, KindRBP only).
func (e Entry) RBPOffset() int { return int(int8(e.Aux)) * 8 }

// sameRule reports whether two entries give the same rule.
func (e Entry) sameRule(o Entry) bool {
	return e.Kind == o.Kind && e.CFAOffset == o.CFAOffset && e.Aux == o.Aux
}

func (e Entry) String() string {
	switch e.Kind {
	case KindRSP, KindRBP:
		s := fmt.Sprintf("%#x cfa=%s+%d", e.Addr, e.Kind, e.CFAOffset)
		if e.Aux != 0 {
			s += fmt.Sprintf(" rbp=c%d", e.RBPOffset())
		}
		return s
	case KindPLT:
		return fmt.Sprintf("%#x cfa=plt(rsp+%d, >=%d)", e.Addr, e.CFAOffset, e.Aux)
	}
	return fmt.Sprintf("%#x %s", e.Addr, e.Kind)
}

// Table is the unwind table of one ELF file.
type Table struct {
	// BuildID is the file's GNU build-id (may be empty).
	BuildID []byte
	// Base is subtracted from a virtual address before the lookup; 0
	// unless the file's code lies above 4 GiB.
	Base uint64
	// Entries are sorted by Addr, strictly increasing. The last entry is
	// KindFallback and marks the end of the covered range.
	Entries []Entry
	// Stats describes the build (not serialized).
	Stats Stats
}

// Stats describes how a table was built.
type Stats struct {
	FDEs       int           // FDEs read
	Fallbacks  int           // entries that say "no rule", gaps included
	BuildTime  time.Duration // wall time of the build
	EhFrame    int           // bytes of .eh_frame read
	DebugFrame int           // bytes of .debug_frame read
}

// Size is the table's size in bytes when marshaled.
func (t *Table) Size() int { return headerSize + pad8(len(t.BuildID)) + len(t.Entries)*EntrySize }

// Lookup returns the entry whose range holds vaddr (the file's virtual
// address, pc − load bias). ok is false outside the table.
func (t *Table) Lookup(vaddr uint64) (e Entry, ok bool) {
	if vaddr < t.Base || vaddr-t.Base > 0xffffffff || len(t.Entries) == 0 {
		return Entry{}, false
	}
	a := uint32(vaddr - t.Base)
	lo, hi := 0, len(t.Entries) // the first entry with Addr > a is in [lo, hi]
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.Entries[mid].Addr <= a {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || lo == len(t.Entries) {
		return Entry{}, false
	}
	return t.Entries[lo-1], true
}

// The serialized header (FORMAT.md).
const (
	magic      = "HSUW"
	version    = 1
	headerSize = 24
	maxBuildID = 64
)

func pad8(n int) int { return (n + 7) &^ 7 }

// MarshalBinary encodes the table in the format of FORMAT.md.
func (t *Table) MarshalBinary() ([]byte, error) {
	if len(t.BuildID) > maxBuildID {
		return nil, fmt.Errorf("%w: build-id of %d bytes", ErrBadTable, len(t.BuildID))
	}
	b := make([]byte, t.Size())
	copy(b, magic)
	binary.LittleEndian.PutUint16(b[4:], version)
	binary.LittleEndian.PutUint16(b[6:], uint16(len(t.BuildID)))
	binary.LittleEndian.PutUint64(b[8:], t.Base)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(t.Entries)))
	copy(b[headerSize:], t.BuildID)
	AppendEntries(b[headerSize+pad8(len(t.BuildID)):headerSize+pad8(len(t.BuildID))], t.Entries)
	return b, nil
}

// AppendEntries appends the encoded entries to b: the array a consumer
// (the interposer, a BPF map) searches.
func AppendEntries(b []byte, es []Entry) []byte {
	for _, e := range es {
		b = binary.LittleEndian.AppendUint32(b, e.Addr)
		b = binary.LittleEndian.AppendUint16(b, e.CFAOffset)
		b = append(b, byte(e.Kind), e.Aux)
	}
	return b
}

// UnmarshalBinary decodes a table, checking everything a consumer relies
// on: entries strictly sorted, known kinds, a closing fallback entry.
func (t *Table) UnmarshalBinary(b []byte) error {
	if len(b) < headerSize || string(b[:4]) != magic {
		return fmt.Errorf("%w: no header", ErrBadTable)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return fmt.Errorf("%w: version %d", ErrBadTable, v)
	}
	idLen := int(binary.LittleEndian.Uint16(b[6:]))
	if idLen > maxBuildID {
		return fmt.Errorf("%w: build-id of %d bytes", ErrBadTable, idLen)
	}
	base := binary.LittleEndian.Uint64(b[8:])
	n := uint64(binary.LittleEndian.Uint32(b[16:]))
	off := headerSize + pad8(idLen)
	if uint64(len(b)) != uint64(off)+n*EntrySize {
		return fmt.Errorf("%w: %d bytes for %d entries", ErrBadTable, len(b), n)
	}
	es := make([]Entry, n)
	for i := range es {
		p := b[off+i*EntrySize:]
		e := Entry{Addr: binary.LittleEndian.Uint32(p), CFAOffset: binary.LittleEndian.Uint16(p[4:]), Kind: Kind(p[6]), Aux: p[7]}
		if e.Kind > KindEnd {
			return fmt.Errorf("%w: entry %d: kind %d", ErrBadTable, i, e.Kind)
		}
		if i > 0 && e.Addr <= es[i-1].Addr {
			return fmt.Errorf("%w: entry %d not sorted", ErrBadTable, i)
		}
		es[i] = e
	}
	if n > 0 && es[n-1].Kind != KindFallback {
		return fmt.Errorf("%w: last entry is not the end marker", ErrBadTable)
	}
	*t = Table{BuildID: append([]byte(nil), b[headerSize:headerSize+idLen]...), Base: base, Entries: es}
	return nil
}
