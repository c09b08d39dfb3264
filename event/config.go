package event

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The vocabulary of a session's configuration, defined once here because
// the providers, the trace file, the public API and the CLI all speak it.
// Each type writes and parses itself by name (encoding.TextMarshaler and
// TextUnmarshaler), so JSON and flags use the same words.

// ErrInvalidFlags is wrapped by every error about an invalid session
// property: an unknown name of one of the types below, a value out of range
// or a combination that cannot work. Package heapscope exports it as
// heapscope.ErrInvalidFlags.
var ErrInvalidFlags = errors.New("invalid session properties")

// names is an enumeration's table of names, indexed by value.
type names []string

func (n names) format(v uint8, what string) string {
	if int(v) < len(n) {
		return n[v]
	}
	return what + "(" + strconv.Itoa(int(v)) + ")"
}

// parse returns the index of s in n, or an error listing n's names.
func (n names) parse(s, what string) (uint8, error) {
	for i, name := range n {
		if name == s {
			return uint8(i), nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q (want %s): %w", what, s, n.choices(), ErrInvalidFlags)
}

// choices writes n as "a, b or c".
func (n names) choices() string {
	if len(n) < 2 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// LogFileMode says how a session writes its trace. The values are stored
// in trace files: do not renumber them.
type LogFileMode uint8

// The log file modes.
const (
	// Sequential writes one file and stops writing, recording that it
	// stopped, when it reaches its maximum size (if set).
	Sequential LogFileMode = iota
	// Circular keeps the newest maximum size worth of events and records
	// how many older ones it dropped.
	Circular
	// NewFile starts a new file, named by substituting 1, 2, ... for the %d
	// in the file name, each time the current one reaches its maximum size.
	// Each file is readable alone.
	NewFile
	// RealTime writes no file: events reach only the hooks.
	RealTime
)

var logFileModeNames = names{"sequential", "circular", "newfile", "realtime"}

func (m LogFileMode) String() string { return logFileModeNames.format(uint8(m), "mode") }

// ParseLogFileMode parses "sequential", "circular", "newfile" or "realtime".
func ParseLogFileMode(s string) (LogFileMode, error) {
	v, err := logFileModeNames.parse(s, "log file mode")
	return LogFileMode(v), err
}

// MarshalText implements encoding.TextMarshaler.
func (m LogFileMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseLogFileMode.
func (m *LogFileMode) UnmarshalText(b []byte) (err error) {
	*m, err = ParseLogFileMode(string(b))
	return err
}

// CaptureMode says whether a session streams every event or keeps
// aggregates.
type CaptureMode uint8

// The capture modes.
const (
	// Stream delivers every event.
	Stream CaptureMode = iota
	// Aggregate keeps live allocations and per-stack totals in kernel maps
	// and delivers snapshots of them at each flush and at stop: for
	// long-running servers where every event would cost too much. eBPF
	// only.
	Aggregate
)

var captureModeNames = names{"stream", "aggregate"}

func (m CaptureMode) String() string { return captureModeNames.format(uint8(m), "mode") }

// ParseCaptureMode parses "stream" or "aggregate".
func ParseCaptureMode(s string) (CaptureMode, error) {
	v, err := captureModeNames.parse(s, "capture mode")
	return CaptureMode(v), err
}

// MarshalText implements encoding.TextMarshaler.
func (m CaptureMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseCaptureMode.
func (m *CaptureMode) UnmarshalText(b []byte) (err error) {
	*m, err = ParseCaptureMode(string(b))
	return err
}

// OnFull says what a provider does when the collector falls behind and its
// buffers are full.
type OnFull uint8

// The full-buffer policies. The preload provider supports both and blocks
// by default; the eBPF provider only drops (a uprobe cannot make the traced
// thread wait for room in the ring).
const (
	// OnFullDefault is the provider's own: Block for preload, Drop for eBPF.
	OnFullDefault OnFull = iota
	// Block makes the traced thread wait for room: exact, but slows the
	// target. Preload only.
	Block
	// Drop discards the event and counts it as lost.
	Drop
)

var onFullNames = names{"default", "block", "drop"}

func (o OnFull) String() string { return onFullNames.format(uint8(o), "OnFull") }

// ParseOnFull parses "default", "block" or "drop".
func ParseOnFull(s string) (OnFull, error) {
	v, err := onFullNames.parse(s, "full-buffer policy")
	return OnFull(v), err
}

// MarshalText implements encoding.TextMarshaler.
func (o OnFull) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseOnFull.
func (o *OnFull) UnmarshalText(b []byte) (err error) {
	*o, err = ParseOnFull(string(b))
	return err
}

// Unwind is how a provider walks stacks. The values are the interposer's
// (internal/preload passes them to its C side): do not renumber them.
type Unwind uint8

// The unwinders.
const (
	// UnwindFP follows the frame-pointer chain: fast, but stops at code
	// built without frame pointers.
	UnwindFP Unwind = iota
	// UnwindDWARF uses the call-frame information, for code built without
	// frame pointers; slower. The preload provider interprets it with
	// libunwind; the eBPF provider unwinds in BPF with tables built from it
	// (package unwind), falling back to frame pointers where a file has
	// none.
	UnwindDWARF
	// UnwindTables walks with compact unwind tables built from each file's
	// .eh_frame (package unwind): the stacks DWARF gives, at about the
	// frame-pointer walk's cost. In the preload provider libunwind stands
	// in until a file's table arrived and where a table has no rule; the
	// eBPF provider walks the same tables in BPF (as it does for DWARF),
	// falling back to the frame pointer.
	UnwindTables
)

var unwindNames = names{"fp", "dwarf", "tables"}

func (u Unwind) String() string { return unwindNames.format(uint8(u), "unwind") }

// ParseUnwind parses "fp", "dwarf" or "tables".
func ParseUnwind(s string) (Unwind, error) {
	v, err := unwindNames.parse(s, "unwinder")
	return Unwind(v), err
}

// MarshalText implements encoding.TextMarshaler.
func (u Unwind) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseUnwind.
func (u *Unwind) UnmarshalText(b []byte) (err error) {
	*u, err = ParseUnwind(string(b))
	return err
}

// Provider is the mechanism that captures a session's events. The empty
// Provider means the default of the call that starts the session.
type Provider string

// The providers.
const (
	// ProviderPreload interposes the malloc family in the traced program
	// with LD_PRELOAD. It needs no privileges and costs least, but can only
	// trace programs the session launches.
	ProviderPreload Provider = "preload"
	// ProviderEBPF places uprobes on the allocator of running processes. It
	// needs root (or CAP_BPF and CAP_PERFMON) and no change to the target.
	ProviderEBPF Provider = "ebpf"
)

var providerNames = names{string(ProviderPreload), string(ProviderEBPF)}

func (p Provider) String() string { return string(p) }

// ParseProvider parses "preload" or "ebpf".
func ParseProvider(s string) (Provider, error) {
	v, err := providerNames.parse(s, "provider")
	if err != nil {
		return "", err
	}
	return Provider(providerNames[v]), nil
}

// MarshalText implements encoding.TextMarshaler.
func (p Provider) MarshalText() ([]byte, error) { return []byte(p), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseProvider; the
// empty text is the empty (default) Provider.
func (p *Provider) UnmarshalText(b []byte) (err error) {
	if len(b) == 0 {
		*p = ""
		return nil
	}
	*p, err = ParseProvider(string(b))
	return err
}

// The stack kind sets a session's configuration uses. In a configuration,
// the zero KindSet means "the default"; NoStacks means none.
const (
	// NoStacks is the set that takes no stacks at all. It holds no kind
	// (bit 0, which no Kind uses), so that it differs from the zero set.
	NoStacks KindSet = 1
	// DefaultStacks is what carries a stack when nothing was chosen, on
	// a session of the malloc heap: allocations and reallocations.
	DefaultStacks = KindSet(1<<KindAlloc | 1<<KindRealloc)
	// AllKinds holds every kind.
	AllKinds = KindSet(1<<KindAlloc | 1<<KindRealloc | 1<<KindFree | 1<<KindMmap | 1<<KindMunmap)
)

// ParseKindSet parses a comma-separated list of kinds ("alloc,realloc"),
// "all", "none" (NoStacks) or "default" (the zero set).
func ParseKindSet(s string) (KindSet, error) {
	switch s {
	case "default":
		return 0, nil
	case "none":
		return NoStacks, nil
	case "all":
		return AllKinds, nil
	case "":
		return 0, fmt.Errorf("empty: give kinds (%s), all or none: %w", names(kindNames[1:]).choices(), ErrInvalidFlags)
	}
	var set KindSet
	for _, name := range strings.Split(s, ",") {
		k, err := ParseKind(strings.TrimSpace(name))
		if err != nil {
			return 0, fmt.Errorf("%w (want %s, all or none): %w", err, names(kindNames[1:]).choices(), ErrInvalidFlags)
		}
		set |= KindsOf(k)
	}
	return set, nil
}

// MarshalText implements encoding.TextMarshaler with String.
func (s KindSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseKindSet.
func (s *KindSet) UnmarshalText(b []byte) (err error) {
	*s, err = ParseKindSet(string(b))
	return err
}
