package ebpf

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/usdt"
)

// Source is what a tracer probes in a process (Config.Source).
type Source uint8

// The sources.
const (
	// SourceUprobes probes the allocator's functions (see the package
	// documentation): every call is seen, or sampled in BPF.
	SourceUprobes Source = iota
	// SourceUSDT traces through OpenTelemetry's otel_memory USDT probes,
	// alloc(ptr, size, weight) and free(ptr), which a target that samples
	// its own allocations fires (bpf/usdt.bpf.h): each allocation event
	// stands for weight bytes (event.Event.OldSize). The probes of every
	// file the process maps are traced, the executable's and its
	// libraries', also those it loads later (dlopen). A process that has
	// no file with both probes at the attach is refused.
	SourceUSDT
	// SourceAuto traces a process through its otel_memory probes when it
	// has them, through its allocator's functions otherwise.
	SourceAuto
)

func (s Source) String() string {
	switch s {
	case SourceUprobes:
		return "uprobes"
	case SourceUSDT:
		return "usdt"
	case SourceAuto:
		return "auto"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// ParseSource parses "uprobes", "usdt" or "auto".
func ParseSource(s string) (Source, error) {
	for _, v := range []Source{SourceUprobes, SourceUSDT, SourceAuto} {
		if s == v.String() {
			return v, nil
		}
	}
	return 0, fmt.Errorf("source %q: want uprobes, usdt or auto", s)
}

// The otel_memory contract: one provider, two probes.
const (
	usdtProvider = "otel_memory"
	usdtAlloc    = "alloc"
	usdtFree     = "free"
)

// usdtTarget is one file of a process with both otel_memory probes.
type usdtTarget struct {
	path, open   string
	key          fileKey
	heap         event.Heap
	allocs, free []usdt.Probe // each site of each probe
}

// fileKey names a file by its device and inode, as the process maps it.
type fileKey struct {
	dev   string
	inode uint64
}

// findUSDT returns the files pid maps executable that define both
// otel_memory probes. Each file's notes are read once (by device and
// inode); a file whose notes cannot be read has none.
func (t *Tracer) findUSDT(pid int) ([]usdtTarget, error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	exe, _ := proc.Exe(pid)
	var out []usdtTarget
	seen := map[fileKey]bool{}
	for _, m := range maps {
		k := fileKey{m.Dev, m.Inode}
		if !m.Exec() || !m.File() || seen[k] {
			continue
		}
		seen[k] = true
		open := proc.MappedFile(pid, m)
		ps := t.probesOf(k, open)
		allocs, frees := usdt.Find(ps, usdtProvider, usdtAlloc), usdt.Find(ps, usdtProvider, usdtFree)
		if len(allocs) == 0 || len(frees) == 0 {
			continue
		}
		out = append(out, usdtTarget{path: m.Path, open: open, key: k, heap: usdtHeap(m.Path, exe), allocs: allocs, free: frees})
	}
	return out, nil
}

// probesOf returns the probes of the file open names, read once per key.
func (t *Tracer) probesOf(k fileKey, open string) []usdt.Probe {
	t.mu.Lock()
	ps, ok := t.usdtFiles[k]
	t.mu.Unlock()
	if ok {
		return ps
	}
	ps, err := usdt.Open(open)
	if err != nil {
		ps = nil // not an ELF file we can read: no probes
	}
	t.mu.Lock()
	if t.usdtFiles == nil {
		t.usdtFiles = map[fileKey][]usdt.Probe{}
	}
	t.usdtFiles[k] = ps
	t.mu.Unlock()
	return ps
}

// usdtHeap is the heap a file's probes report: the allocator it is, the
// executable's own, else the C library's (whose malloc a sampler wraps).
func usdtHeap(path, exe string) event.Heap {
	base := filepath.Base(path)
	switch {
	case path == exe:
		return event.HeapExe
	case strings.HasPrefix(base, "libjemalloc.so"):
		return event.HeapJemalloc
	case strings.HasPrefix(base, "libtcmalloc"):
		return event.HeapTcmalloc
	case strings.HasPrefix(base, "libmimalloc"):
		return event.HeapMimalloc
	}
	return event.HeapLibc
}

// usdtSiteKey names a probe site of a file.
type usdtSiteKey struct {
	file   fileKey
	offset uint64
}

// usdtSite returns the index in usdt_sites of a probe's site, writing its
// argument specs there the first time: sites are shared by every process
// that maps the file.
func (t *Tracer) usdtSite(k usdtSiteKey, p usdt.Probe, heap event.Heap, nargs int) (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.usdtSites[k]; ok {
		return i, nil
	}
	site, err := usdtSpec(p, heap, nargs)
	if err != nil {
		return 0, err
	}
	if len(t.usdtSites) >= usdtMaxSites {
		return 0, fmt.Errorf("probe %s:%s: more than %d probe sites", p.Provider, p.Name, usdtMaxSites)
	}
	i := uint32(len(t.usdtSites))
	if err := t.coll.Maps["usdt_sites"].Put(i, site); err != nil {
		return 0, fmt.Errorf("probe %s:%s: %w", p.Provider, p.Name, err)
	}
	if t.usdtSites == nil {
		t.usdtSites = map[usdtSiteKey]uint32{}
	}
	t.usdtSites[k] = i
	return i, nil
}

// usdtMaxSites is bpf/usdt.bpf.h's USDT_MAX_SITES.
const usdtMaxSites = 1024

// The kinds of bpf/usdt.bpf.h's struct usdt_arg.
const (
	usdtArgConst = 0
	usdtArgReg   = 1
	usdtArgMem   = 2
)

// errUSDTArg is a probe argument the BPF side cannot read.
var errUSDTArg = errors.New("an argument heapscope cannot read")

// usdtSpec turns a probe's argument specs into the BPF side's: a
// register (its offset in struct pt_regs, x86-64), memory at a register
// plus a displacement, or a constant, each of its size and signedness.
func usdtSpec(p usdt.Probe, heap event.Heap, nargs int) (heapscopeUsdtSite, error) {
	var s heapscopeUsdtSite
	s.Heap = uint8(heap)
	if p.ArgsErr != nil {
		return s, fmt.Errorf("probe %s:%s: %w", p.Provider, p.Name, p.ArgsErr)
	}
	if len(p.Args) < nargs || nargs > len(s.Arg) {
		return s, fmt.Errorf("probe %s:%s has %d arguments, the contract %d", p.Provider, p.Name, len(p.Args), nargs)
	}
	for i := 0; i < nargs; i++ {
		a := p.Args[i]
		bad := func(why string) error {
			return fmt.Errorf("probe %s:%s argument %q: %w (%s)", p.Provider, p.Name, a.Spec, errUSDTArg, why)
		}
		size := a.Size
		if size == 0 {
			size = 8 // sdt.h's own specs always have one; a bare operand is a word
		}
		d := &s.Arg[i]
		d.Shift = uint8(64 - 8*size)
		d.Sign = boolByte(a.Signed)
		switch a.Kind {
		case usdt.ArgConstant:
			d.Kind, d.Val = usdtArgConst, uint64(a.Value)
		case usdt.ArgRegister, usdt.ArgMemory:
			_, off, ok := usdt.PtRegsX86(a.Reg)
			if !ok {
				return s, bad("not an x86-64 register")
			}
			d.Kind, d.Val = usdtArgReg, uint64(off)
			if a.Kind == usdt.ArgMemory {
				if a.Index != "" || a.Symbol != "" || a.Reg == "rip" {
					return s, bad("an index register or a symbol")
				}
				d.Kind, d.Off = usdtArgMem, a.Offset
			}
		default:
			return s, bad("unknown kind")
		}
	}
	return s, nil
}

// attachUSDT attaches the USDT programs to each probe site of one file for
// pid, with the probe's semaphore as the uprobe's reference counter: the
// kernel raises it while the probe is attached (turning the target's
// sampler on) and lowers it when the link goes. Frees first, as with the
// allocator's functions: while only some probes are live, a block is seen
// freed rather than leaked. It returns the links made even when it fails.
func (t *Tracer) attachUSDT(pid int, tg usdtTarget) ([]link.Link, error) {
	ex, err := link.OpenExecutable(tg.open)
	if err != nil {
		return nil, fmt.Errorf("ebpf: pid %d: %s: %w", pid, tg.path, err)
	}
	var links []link.Link
	for _, g := range []struct {
		prog   string
		probes []usdt.Probe
		nargs  int
	}{{"usdt_free", tg.free, 1}, {"usdt_alloc", tg.allocs, 3}} {
		for _, p := range g.probes {
			i, err := t.usdtSite(usdtSiteKey{tg.key, p.Offset}, p, tg.heap, g.nargs)
			if err != nil {
				return links, fmt.Errorf("ebpf: pid %d: %s: %w", pid, tg.path, err)
			}
			l, err := ex.Uprobe("", t.coll.Programs[g.prog], &link.UprobeOptions{
				Address: p.Offset, PID: pid, Cookie: uint64(i), RefCtrOffset: p.SemaphoreOffset,
			})
			if err != nil {
				return links, attachError(pid, tg.path, err)
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// usdtTargets returns the files to trace pid through, by its otel_memory
// probes, as Config.Source says: nil to probe its allocator's functions
// instead.
func (t *Tracer) usdtTargets(pid int, exe string) ([]usdtTarget, error) {
	if t.cfg.Source == SourceUprobes {
		return nil, nil
	}
	us, err := t.findUSDT(pid)
	if err != nil {
		return nil, fmt.Errorf("ebpf: %w", err)
	}
	if len(us) == 0 && t.cfg.Source == SourceUSDT {
		return nil, fmt.Errorf("ebpf: pid %d (%s) maps no file with the otel_memory alloc and free probes (--source uprobes or auto traces it through its allocator): %w",
			pid, exe, errs.ErrUnavailable)
	}
	return us, nil
}

// usdtLibrary looks, once per library name the loader lists, for the
// otel_memory probes of files p has mapped since its attach (a library
// loaded with dlopen) when p is traced through its probes, and attaches
// them; a process traced through its allocator's functions (SourceAuto)
// stays so, or its allocations would be counted twice. The files are read
// on a goroutine of its own: they are of the process's choosing. The
// library's semaphores are raised when its probes are attached: until
// then its sampler samples nothing, which the trace then does not miss.
func (t *Tracer) usdtLibrary(p *tracee, name string) {
	p.lmu.Lock()
	if !p.usdt || p.linksClosed || p.usdtNames[name] {
		p.lmu.Unlock()
		return
	}
	p.usdtNames[name] = true
	p.lmu.Unlock()
	go t.usdtLater(p)
}

// usdtLater attaches the probes of the files p maps that have none
// attached yet.
func (t *Tracer) usdtLater(p *tracee) {
	us, err := t.findUSDT(p.pid)
	if err != nil {
		return // it has ended
	}
	for _, tg := range us {
		p.lmu.Lock()
		if p.linksClosed || p.usdtFiles[tg.key] {
			p.lmu.Unlock()
			continue
		}
		p.usdtFiles[tg.key] = true
		p.lmu.Unlock()
		ls, err := t.attachUSDT(p.pid, tg)
		p.lmu.Lock()
		if p.linksClosed {
			closeLinks(ls)
		} else {
			p.links = append(p.links, ls...)
		}
		p.lmu.Unlock()
		if err != nil {
			t.warn(err)
		}
	}
}
