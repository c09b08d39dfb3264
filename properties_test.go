package heapscope

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
)

func TestValidate(t *testing.T) {
	ok := []Properties{
		{LogFileName: "t.hst"},
		{LogFileMode: RealTime},
		{LogFileMode: Circular, LogFileName: "t.hst", MaximumFileSize: 10},
		{LogFileMode: NewFile, LogFileName: "t-%d.hst", MaximumFileSize: 10},
		{LogFileName: "t.hst", Provider: ProviderEBPF, Mode: Aggregate},
		{LogFileName: "t.hst", Provider: ProviderPreload, Unwind: DWARF, OnFull: Drop},
		{LogFileName: "t.hst", Provider: ProviderEBPF, OnFull: Drop},
		{LogFileName: "t.hst", Provider: ProviderPreload, Unwind: Tables},
		{LogFileName: "t.hst", Provider: ProviderEBPF, Unwind: DWARF},
		{LogFileName: "t.hst", Provider: ProviderEBPF, Unwind: Tables},
		{LogFileName: "t.hst", BufferSize: 1024, MinimumBuffers: 2, MaximumBuffers: 2},
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
		{Properties{LogFileMode: RealTime, LogFileName: "x"}, ErrInvalidFlags},
		{Properties{LogFileMode: Circular, LogFileName: "t.hst"}, ErrInvalidFlags},
		{Properties{LogFileMode: NewFile, LogFileName: "t.hst", MaximumFileSize: 1}, ErrInvalidFlags},
		{Properties{LogFileMode: NewFile, LogFileName: "t-%d-%d.hst", MaximumFileSize: 1}, ErrInvalidFlags},
		{Properties{LogFileName: "t-%d.hst"}, ErrInvalidFlags},
		{Properties{LogFileName: "t", BufferSize: 2}, ErrInvalidFlags},
		{Properties{LogFileName: "t", BufferSize: 2048}, ErrInvalidFlags},
		{Properties{LogFileName: "t", MinimumBuffers: 8, MaximumBuffers: 4}, ErrInvalidFlags},
		{Properties{LogFileName: "t", Provider: ProviderPreload, Mode: Aggregate}, ErrInvalidFlags},
		{Properties{LogFileName: "t", Provider: ProviderEBPF, OnFull: Block}, ErrInvalidFlags},
		{Properties{LogFileName: "t", Unwind: Tables + 1}, ErrInvalidFlags},
		{Properties{LogFileName: "t", Provider: "dtrace"}, ErrInvalidFlags},
		{Properties{LogFileName: "t", EnableFlags: 1 << 30}, ErrInvalidFlags},
		{Properties{LogFileName: "t", Mode: Aggregate, EnableFlags: event.FamilyAll}, ErrInvalidFlags},
		{Properties{LogFileName: "t", MaxFrames: 500}, ErrInvalidFlags},
		{Properties{LogFileName: "t", LogFileMode: 9}, ErrInvalidFlags},
		{Properties{LogFileName: "t", BufferSize: 1024, MaximumBuffers: 8192}, ErrOutOfMemory},
	}
	for _, b := range bad {
		err := b.p.Validate()
		if !errors.Is(err, b.want) {
			t.Errorf("%+v: got %v, want %v", b.p, err, b.want)
		}
	}
}

func TestRingBytesIsAPowerOfTwo(t *testing.T) {
	p := Properties{BufferSize: 64, MaximumBuffers: 3}
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

func TestPropertiesJSON(t *testing.T) {
	p := Properties{LogFileMode: Circular, Mode: Aggregate, OnFull: Drop, Unwind: DWARF,
		EnableFlags: event.FamilyMalloc | event.FamilyFree, LogFileName: "x.hst", MaximumFileSize: 3}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"LogFileMode":"circular"`, `"Mode":"aggregate"`, `"OnFull":"drop"`, `"Unwind":"dwarf"`, `"EnableFlags":"malloc,free"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var q Properties
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if q.LogFileMode != p.LogFileMode || q.Mode != p.Mode || q.OnFull != p.OnFull || q.Unwind != p.Unwind ||
		q.EnableFlags != p.EnableFlags || q.MaximumFileSize != 3 {
		t.Errorf("round trip: %+v", q)
	}
}

// TestEBPFRejectsBlock: the eBPF provider cannot make a traced thread wait
// for room, so OnFull block would lose events while saying it cannot; it is
// rejected whether the provider is chosen or Start's default, and the
// provider's default policy is drop.
func TestEBPFRejectsBlock(t *testing.T) {
	_, err := Start("ebpf-block", Properties{LogFileMode: RealTime, OnFull: Block}, []int{os.Getpid()}, 0)
	if !errors.Is(err, ErrInvalidFlags) || !strings.Contains(err.Error(), "block") {
		t.Errorf("Start (ebpf by default) with OnFull block: %v, want ErrInvalidFlags naming it", err)
	}
	_, err = Launch("ebpf-block", Properties{LogFileMode: RealTime, Provider: ProviderEBPF, OnFull: Block}, exec.Command("true"), 0)
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
