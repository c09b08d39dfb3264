package heapscope

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
)

func TestValidate(t *testing.T) {
	ok := []Properties{
		{File: "t.hst"},
		{FileMode: RealTime},
		{FileMode: Circular, File: "t.hst", MaxFileSize: 10 * MiB},
		{FileMode: NewFile, File: "t-%d.hst", MaxFileSize: 10 * MiB},
		{File: "t.hst", Provider: ProviderEBPF, Mode: Aggregate},
		{File: "t.hst", Provider: ProviderPreload, Unwind: DWARF, OnFull: Drop},
		{File: "t.hst", Provider: ProviderEBPF, OnFull: Drop},
		{File: "t.hst", Provider: ProviderPreload, Unwind: Tables},
		{File: "t.hst", Provider: ProviderEBPF, Unwind: DWARF},
		{File: "t.hst", Provider: ProviderEBPF, Unwind: Tables},
		{File: "t.hst", BufferSize: MiB, Buffers: 2},
		{File: "t.hst", StackEvents: event.NoStacks},
		{File: "t.hst", StackEvents: event.AllKinds},
		{FileMode: RealTime, Export: []string{"otlp=http://127.0.0.1:4318", "otlp=grpc://h:4317", "pprof=https://h/x"}},
		{FileMode: RealTime, Export: []string{"otlp=grpc://h:4317"}, ExportInterval: time.Second, ExportAddresses: true},
		{File: "t", Sample: 512 * KiB, EmitUSDT: true},
		{File: "t", Sample: 512 * KiB, EmitUSDT: true, Provider: ProviderPreload},
		{File: "t", Sample: 512 * KiB, Source: SourceUSDT},
		{File: "t", Sample: 512 * KiB, Source: SourceAuto, Provider: ProviderEBPF},
		{File: "t", Source: SourceUprobes},
	}
	for _, p := range ok {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := []struct {
		p    Properties
		want error
	}{
		{Properties{}, ErrInvalidFlags}, // sequential without a file
		{Properties{FileMode: RealTime, File: "x"}, ErrInvalidFlags},
		{Properties{FileMode: Circular, File: "t.hst"}, ErrInvalidFlags},
		{Properties{FileMode: NewFile, File: "t.hst", MaxFileSize: MiB}, ErrInvalidFlags},
		{Properties{FileMode: NewFile, File: "t-%d-%d.hst", MaxFileSize: MiB}, ErrInvalidFlags},
		{Properties{File: "t-%d.hst"}, ErrInvalidFlags},
		{Properties{File: "t", BufferSize: 2 * KiB}, ErrInvalidFlags},
		{Properties{File: "t", BufferSize: 2 * MiB}, ErrInvalidFlags},
		{Properties{File: "t", Buffers: -1}, ErrInvalidFlags},
		{Properties{File: "t", MaxFileSize: 1}, ErrInvalidFlags}, // a byte: a size in MB, as ETW's was
		{Properties{File: "t", StackEvents: 1 << 7}, ErrInvalidFlags},
		{Properties{File: "t", Provider: ProviderPreload, Mode: Aggregate}, ErrInvalidFlags},
		{Properties{File: "t", Provider: ProviderEBPF, OnFull: Block}, ErrInvalidFlags},
		{Properties{File: "t", Unwind: Tables + 1}, ErrInvalidFlags},
		{Properties{File: "t", Provider: "dtrace"}, ErrInvalidFlags},
		{Properties{File: "t", Families: 1 << 30}, ErrInvalidFlags},
		{Properties{File: "t", Mode: Aggregate, Families: event.FamilyAll}, ErrInvalidFlags},
		{Properties{File: "t", MaxFrames: 500}, ErrInvalidFlags},
		{Properties{File: "t", FileMode: 9}, ErrInvalidFlags},
		{Properties{File: "t", BufferSize: MiB, Buffers: 8192}, ErrOutOfMemory},
		{Properties{File: "t", Export: []string{"http://h:4318"}}, ErrInvalidFlags},
		{Properties{File: "t", Export: []string{"jaeger=http://h:4318"}}, ErrInvalidFlags},
		{Properties{File: "t", Export: []string{"pprof=grpc://h:4317"}}, ErrInvalidFlags},
		{Properties{File: "t", Export: []string{"otlp=http://"}}, ErrInvalidFlags},
		{Properties{File: "t", Export: []string{"otlp=http://h"}, ExportInterval: 500 * time.Millisecond}, ErrInvalidFlags},
		{Properties{File: "t", Export: []string{"otlp=http://h"}, ExportInterval: -time.Second}, ErrInvalidFlags},
		{Properties{File: "t", ExportAddresses: true}, ErrInvalidFlags},
		{Properties{File: "t", EmitUSDT: true}, ErrInvalidFlags},
		{Properties{File: "t", Sample: KiB, EmitUSDT: true, Provider: ProviderEBPF}, ErrInvalidFlags},
		{Properties{File: "t", Source: SourceUSDT}, ErrInvalidFlags},
		{Properties{File: "t", Sample: KiB, Source: SourceUSDT, Mode: Aggregate}, ErrInvalidFlags},
		{Properties{File: "t", Sample: KiB, Source: SourceAuto, Provider: ProviderPreload}, ErrInvalidFlags},
		{Properties{File: "t", Source: "dtrace"}, ErrInvalidFlags},
	}
	for _, b := range bad {
		err := b.p.Validate()
		if !errors.Is(err, b.want) {
			t.Errorf("%+v: got %v, want %v", b.p, err, b.want)
		}
	}
}

func TestRingBytesIsAPowerOfTwo(t *testing.T) {
	p := Properties{BufferSize: 64 * KiB, Buffers: 3}
	if got := p.ringBytes(); got != 256<<10 {
		t.Errorf("ringBytes = %d", got)
	}
}

func TestParse(t *testing.T) {
	for _, m := range []LogFileMode{Sequential, Circular, NewFile, RealTime} {
		if got, err := ParseLogFileMode(m.String()); err != nil || got != m {
			t.Errorf("%v: %v, %v", m, got, err)
		}
	}
	if _, err := ParseLogFileMode("append"); !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("append: %v", err)
	}
	if m, err := ParseCaptureMode("aggregate"); err != nil || m != Aggregate {
		t.Errorf("aggregate: %v, %v", m, err)
	}
}

// TestPropertiesJSON: Properties (in Status, on the control socket) write
// snake_case keys, enumerations by name, sizes in bytes and durations in
// ns, and read back what they wrote.
func TestPropertiesJSON(t *testing.T) {
	p := Properties{FileMode: Circular, Mode: Aggregate, OnFull: Drop, Unwind: DWARF, StackEvents: event.NoStacks,
		Families: event.FamilyMalloc | event.FamilyFree, File: "x.hst", MaxFileSize: 3 * MiB, BufferSize: 8 * KiB,
		FlushInterval: time.Millisecond}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"file_mode":"circular"`, `"mode":"aggregate"`, `"on_full":"drop"`, `"unwind":"dwarf"`,
		`"families":"malloc,free"`, `"stack_events":"none"`, `"max_file_size":3145728`, `"buffer_size":8192`, `"flush_interval_ns":1000000`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	if m := regexp.MustCompile(`"[a-z_]*[A-Z][A-Za-z_]*":`).FindString(string(b)); m != "" {
		t.Errorf("%s has the key %s, not snake_case", b, m)
	}
	var q Properties
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(q, p) {
		t.Errorf("round trip: %+v, want %+v", q, p)
	}
}

// TestZeroProperties: every zero field but File has its default, applied
// in one place; Validate wants only the file, as the doc says.
func TestZeroProperties(t *testing.T) {
	if err := (Properties{}).Validate(); !errors.Is(err, ErrInvalidFlags) || !strings.Contains(err.Error(), "File") {
		t.Errorf("zero Properties: %v, want ErrInvalidFlags naming File", err)
	}
	p := Properties{File: "t.hst"}
	if err := p.Validate(); err != nil {
		t.Fatalf("Properties{File}: %v", err)
	}
	d := p.withDefaults(ProviderPreload)
	want := Properties{File: "t.hst", BufferSize: DefaultBufferSize, Buffers: DefaultBuffers, FlushInterval: DefaultFlushInterval,
		Families: event.FamilyHeap, StackEvents: DefaultStacks, Provider: ProviderPreload, OnFull: Block, MaxFrames: MaxFrames,
		TimeResolution: 10 * time.Microsecond, MaxStacks: DefaultMaxStacks, UnwindTablesSize: DefaultUnwindTablesSize}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("defaults %+v, want %+v", d, want)
	}
	if d := (Properties{FileMode: RealTime, Families: event.FamilyAll}).withDefaults(ProviderEBPF); d.StackEvents != DefaultStacksFor(event.FamilyAll) || d.OnFull != Drop {
		t.Errorf("defaults with mmap, ebpf: stacks %v, on full %v", d.StackEvents, d.OnFull)
	}
}

// TestEBPFRejectsBlock: the eBPF provider cannot make a traced thread wait
// for room, so OnFull block would lose events while saying it cannot; it is
// rejected whether the provider is chosen or Start's default, and the
// provider's default policy is drop.
func TestEBPFRejectsBlock(t *testing.T) {
	_, err := Start("ebpf-block", Properties{FileMode: RealTime, OnFull: Block}, []int{os.Getpid()})
	if !errors.Is(err, ErrInvalidFlags) || !strings.Contains(err.Error(), "block") {
		t.Errorf("Start (ebpf by default) with OnFull block: %v, want ErrInvalidFlags naming it", err)
	}
	_, err = Launch("ebpf-block", Properties{FileMode: RealTime, Provider: ProviderEBPF, OnFull: Block}, exec.Command("true"))
	if !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("Launch with the ebpf provider and OnFull block: %v, want ErrInvalidFlags", err)
	}
	if p := (Properties{Provider: ProviderEBPF}).withDefaults(ProviderPreload); p.OnFull != Drop {
		t.Errorf("the ebpf provider's default policy is %v, want drop", p.OnFull)
	}
	if p := (Properties{}).withDefaults(ProviderPreload); p.OnFull != Block {
		t.Errorf("the preload provider's default policy is %v, want block", p.OnFull)
	}
}

// TestPropertyError: Validate's error names the field and what it may be,
// and wraps ErrInvalidFlags; ValidateGiven takes a 0 as a value, not the
// default.
func TestPropertyError(t *testing.T) {
	for _, c := range []struct {
		p     Properties
		field string
		text  string
	}{
		{Properties{File: "t", BufferSize: 2 * KiB}, "BufferSize", "BufferSize 2KiB: must be 0 (the default) or 4KiB to 1MiB"},
		{Properties{File: "t", MaxFrames: 500}, "MaxFrames", "MaxFrames 500: must be 0 (the default) or 1 to 127"},
		{Properties{File: "t", BufferSize: MiB, Buffers: 8192}, "Buffers", "Buffers 8192: must be 1 to 4096 (with BufferSize 1MiB)"},
		{Properties{File: "t", Provider: ProviderEBPF, OnFull: Block}, "OnFull", "OnFull block with Provider ebpf: "},
		{Properties{File: "t", Sample: 64 * KiB, Families: event.FamilyAll}, "Sample", "Sample: Families mmap: mmap and munmap are not sampled"},
		{Properties{FileMode: Circular, File: "t"}, "MaxFileSize", "MaxFileSize 0 with FileMode circular: "},
	} {
		err := c.p.Validate()
		var pe *PropertyError
		if !errors.As(err, &pe) || pe.Field != c.field || !strings.HasPrefix(err.Error(), c.text) || !errors.Is(err, ErrInvalidFlags) && !errors.Is(err, ErrOutOfMemory) {
			t.Errorf("%+v: %v (field %q), want field %s and %q", c.p, err, pe.Field, c.field, c.text)
		}
	}
	given := Properties{File: "t", BufferSize: DefaultBufferSize, Buffers: DefaultBuffers, FlushInterval: time.Second, MaxFrames: MaxFrames, TimeResolution: time.Microsecond}
	if err := given.ValidateGiven(); err != nil {
		t.Fatalf("%+v: %v", given, err)
	}
	for field, zero := range map[string]func(*Properties){
		"BufferSize":     func(p *Properties) { p.BufferSize = 0 },
		"Buffers":        func(p *Properties) { p.Buffers = 0 },
		"FlushInterval":  func(p *Properties) { p.FlushInterval = 0 },
		"MaxFrames":      func(p *Properties) { p.MaxFrames = 0 },
		"TimeResolution": func(p *Properties) { p.TimeResolution = 0 },
	} {
		p := given
		zero(&p)
		var pe *PropertyError
		if err := p.ValidateGiven(); !errors.As(err, &pe) || pe.Field != field || pe.Zero != "" {
			t.Errorf("%s 0: ValidateGiven %v", field, err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s 0: Validate %v, want the default", field, err)
		}
	}
}
