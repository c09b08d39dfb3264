package analyze_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// mmapOnly passes a model the mapping events of one process between its
// markers (see mmap_ranges.c).
type mmapOnly struct {
	*analyze.Model
	pid   uint32
	on    bool
	calls int
}

func (s *mmapOnly) Events(evs []event.Event) error {
	var kept []event.Event
	for _, e := range evs {
		if e.Heap != event.HeapMmap || e.PID != s.pid {
			continue
		}
		switch {
		case e.Kind == event.KindMunmap && e.Addr == 0x10000:
			s.on = true
		case e.Kind == event.KindMunmap && e.Addr == 0x20000:
			s.on = false
		case s.on:
			kept = append(kept, e)
		}
	}
	s.calls += len(kept)
	return s.Model.Events(kept)
}

// TestMappingsTraced traces mmap_ranges, which maps twice and trims both
// ends to align, punches a hole in a mapping, maps with MAP_FIXED over part
// of one, grows and shrinks one with mremap and trims a tail, with each
// provider: the bytes the model finds still mapped at exit are exactly
// those the program left mapped, and no munmap is unmatched. (Found by
// start address only, the head and middle munmaps were unmatched and freed
// nothing, and the MAP_FIXED pages counted twice.)
func TestMappingsTraced(t *testing.T) {
	bin := testutil.MustBuild(t, "mmap_ranges", testutil.Options{})
	t.Setenv(registry.DirEnv, t.TempDir())
	for _, provider := range []heapscope.Provider{heapscope.ProviderPreload, heapscope.ProviderEBPF} {
		t.Run(string(provider), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mmap.hst")
			cmd := exec.Command(bin)
			var out bytes.Buffer
			cmd.Stdout = &out
			props := heapscope.Properties{Provider: provider, File: path, Families: event.FamilyAll}
			s, err := heapscope.Launch("mmap-ranges-"+string(provider), props, cmd)
			if err != nil {
				if provider == heapscope.ProviderEBPF {
					testutil.SkipWithoutEBPF(t, err)
				}
				t.Fatal(err)
			}
			if err := s.Wait(); err != nil {
				t.Fatal(err)
			}
			var live uint64
			var calls int
			if _, err := fmt.Sscanf(out.String(), "live %d\ncalls %d\n", &live, &calls); err != nil {
				t.Fatalf("mmap_ranges printed %q: %v", out.String(), err)
			}
			r, err := tracefile.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			sink := &mmapOnly{Model: analyze.New(analyze.Options{}), pid: uint32(cmd.Process.Pid)}
			if err := r.Replay(sink, tracefile.Window{}); err != nil {
				t.Fatal(err)
			}
			p := sink.Profile()
			t.Logf("%d calls traced of %d; leaked %d B in %d mappings (truth %d B); %d unmatched", sink.calls, calls,
				p.Summary.LiveBytes, p.Summary.LiveBlocks, live, p.Summary.UnmatchedFrees)
			if sink.calls != calls {
				t.Errorf("%d mapping calls traced, the program made %d", sink.calls, calls)
			}
			if p.Summary.LiveBytes != live || p.Summary.UnmatchedFrees != 0 {
				t.Errorf("leaked %d B with %d unmatched munmaps; the program left %d B mapped and unmapped only its own",
					p.Summary.LiveBytes, p.Summary.UnmatchedFrees, live)
			}
		})
	}
}
