package live

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// record runs top_grow for secs under a session writing path, following the
// file with a Sampler while it runs; it returns the frames sampled.
func record(t *testing.T, path string, secs string) []*Frame {
	t.Helper()
	t.Setenv(registry.DirEnv, t.TempDir())
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	cmd := exec.Command(bin, secs, "200000")
	s, err := heapscope.Launch("live-test", heapscope.Properties{File: path, StackEvents: event.KindsOf(event.KindAlloc)}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := Open(path, symbolize.Options{})
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	defer tail.Close()
	smp := NewSampler(tail)
	var frames []*Frame
	for ended := false; !ended; {
		select {
		case <-s.Done():
			ended = true
		case <-time.After(300 * time.Millisecond):
			s.Flush()
		}
		f, err := smp.Sample(0)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	return frames
}

func summaries(t *testing.T, path string, p *report.Report) (got, want [5]uint64) {
	t.Helper()
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range []*report.Report{p, rep} {
		s := pr.Profile.Summary
		v := [5]uint64{s.Allocations, s.Frees, s.Bytes, s.LiveBytes, s.Temporary}
		if i == 0 {
			got = v
		} else {
			want = v
		}
	}
	return got, want
}

// TestFollowLiveSession follows a session's file while it is written: the
// frames show grow_heap's live bytes growing, and, once the session ended,
// the model read chunk by chunk agrees with a report of the whole file.
func TestFollowLiveSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.hst")
	frames := record(t, path, "2")
	grew := 0
	var prev uint64
	for _, f := range frames {
		for _, s := range f.Sites {
			if len(s.Stack) > 0 && s.Stack[0].Function == "grow_heap" {
				if s.Live > prev {
					grew++
				}
				prev = s.Live
			}
		}
	}
	if grew < 3 {
		t.Errorf("grow_heap grew in %d of %d frames, want at least 3", grew, len(frames))
	}
	tail, err := Open(path, symbolize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	if _, err := tail.Poll(); err != nil {
		t.Fatal(err)
	}
	if got, want := summaries(t, path, tail.Report(tail.Profile())); got != want {
		t.Errorf("the whole file polled: %v, want the report's %v", got, want)
	}
}

// TestPollPieces writes a finished trace into a file in pieces that end in
// the middle of chunks, polling after each: every chunk is read once, when
// it is whole, and the result is the whole file's.
func TestPollPieces(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.hst")
	record(t, src, "1")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "growing.hst")
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The header (and the start of the first chunk) first: Open needs it.
	first := min(1000, len(data))
	if _, err := f.Write(data[:first]); err != nil {
		t.Fatal(err)
	}
	tail, err := Open(dst, symbolize.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	var read int64
	for off, step := first, 997; off < len(data); off += step {
		end := min(off+step, len(data))
		if _, err := f.Write(data[off:end]); err != nil {
			t.Fatal(err)
		}
		n, err := tail.Poll()
		if err != nil {
			t.Fatalf("poll at %d of %d bytes: %v", end, len(data), err)
		}
		read += n
	}
	if read == 0 || read > int64(len(data)) {
		t.Errorf("read %d bytes of chunks of a %d-byte file", read, len(data))
	}
	if got, want := summaries(t, src, tail.Report(tail.Profile())); got != want {
		t.Errorf("polled in pieces: %v, want the report's %v", got, want)
	}
}

func TestOpenNotATrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(path, []byte("not a trace at all, but long enough to have a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, symbolize.Options{}); !errors.Is(err, ErrNotTrace) {
		t.Errorf("Open of a text file: %v, want ErrNotTrace", err)
	}
}
