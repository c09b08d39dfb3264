package tracefile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
)

// TestCutAnywhere cuts a multi-chunk file at every byte and checks that
// the reader recovers exactly the chunks before the cut, with a warning
// when a chunk was cut, and never fails after the header.
func TestCutAnywhere(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "full.hst")
	// Small chunks (a flush every 300 events) and few stacks.
	all := writeSynthFrom(t, newSynth(1, 100, 4, 30), path, testHeader(Sequential, 0), Options{TimeResolution: 1}, 3000, 300)
	data, err := os.ReadFile(path)
	check(t, err)

	// Where each chunk ends, and how many events precede that end.
	r, err := Open(path)
	check(t, err)
	dataStart := r.dataStart
	type end struct {
		at     int64
		events int
	}
	var ends []end
	n := 0
	check(t, r.forIndex(func(e indexEntry) error {
		n += int(e.hdr.events)
		ends = append(ends, end{e.off + e.hdr.size(), n})
		return nil
	}))
	r.Close()
	if len(ends) < 10 {
		t.Fatalf("only %d chunks", len(ends))
	}

	// Cut from the end, a byte at a time.
	cut := filepath.Join(dir, "cut.hst")
	check(t, os.WriteFile(cut, data, 0o644))
	step := 1
	if testing.Short() {
		step = 13
	}
	t.Logf("%d bytes, %d chunks", len(data), len(ends))
	for size := len(data) - 1; size >= 0; size -= step {
		check(t, os.Truncate(cut, int64(size)))
		r, err := Open(cut)
		if int64(size) < dataStart && err != nil {
			// Inside the header (its padding aside).
			var fe *FormatError
			if !errors.Is(err, ErrTruncated) || !errors.As(err, &fe) {
				t.Fatalf("cut at %d, inside the header: Open returned %v", size, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", size, err)
		}
		c := &counter{Sink: event.Discard}
		if err := r.Replay(c, Window{}); err != nil {
			t.Fatalf("cut at %d: %v", size, err)
		}
		warns := r.Warnings()
		r.Close()
		want, complete := 0, false
		for _, e := range ends {
			if e.at <= int64(size) {
				want = e.events
				complete = e.at == int64(size)
			}
		}
		if size <= int(ends[len(ends)-1].at) && c.events != want {
			t.Fatalf("cut at %d: %d events, want the %d of the complete chunks", size, c.events, want)
		}
		if size > int(ends[len(ends)-1].at) {
			if c.events != len(all) {
				t.Fatalf("cut at %d (in the index): %d events, want all %d", size, c.events, len(all))
			}
			if containsWarning(warns, "lost") && !containsWarning(warns, "no chunk lost") {
				t.Fatalf("cut at %d (in the index): warnings %q", size, warns)
			}
		}
		if size > int(dataStart) && size < int(ends[len(ends)-1].at) && !complete && !containsWarning(warns, "lost") {
			t.Fatalf("cut at %d, inside a chunk: no warning of loss in %q", size, warns)
		}
	}
}

// TestDamagedChunkSkipped flips a byte inside a chunk: the reader skips
// that chunk, says so, and reads the rest.
func TestDamagedChunkSkipped(t *testing.T) {
	for _, index := range []bool{true, false} {
		dir := t.TempDir()
		path := filepath.Join(dir, "d.hst")
		all := writeSynth(t, path, testHeader(Sequential, 0), Options{TimeResolution: 1}, 3000, 300)
		r, err := Open(path)
		check(t, err)
		var victim indexEntry
		i := 0
		check(t, r.forIndex(func(e indexEntry) error {
			if i == 4 {
				victim = e
			}
			i++
			return nil
		}))
		r.Close()
		data, err := os.ReadFile(path)
		check(t, err)
		data[victim.off+chunkHeaderSize+int64(victim.hdr.defsLen)+5] ^= 0x40 // in the timeline
		if !index {
			data = data[:len(data)-3] // and the trailer is gone
		}
		check(t, os.WriteFile(path, data, 0o644))
		rec, warns := readAll(t, path, Window{})
		if len(rec.events) != len(all)-int(victim.hdr.events) {
			t.Errorf("index=%v: %d events, want %d", index, len(rec.events), len(all)-int(victim.hdr.events))
		}
		if !containsWarning(warns, fmt.Sprintf("chunk at byte %d", victim.off)) {
			t.Errorf("index=%v: no warning about the damaged chunk: %q", index, warns)
		}

		// A damaged header: the reader finds the next chunk.
		data[victim.off+20] ^= 1
		check(t, os.WriteFile(path, data, 0o644))
		rec, warns = readAll(t, path, Window{})
		if len(rec.events) != len(all)-int(victim.hdr.events) {
			t.Errorf("index=%v, header damaged: %d events, want %d", index, len(rec.events), len(all)-int(victim.hdr.events))
		}
		if len(warns) == 0 {
			t.Errorf("index=%v, header damaged: no warning", index)
		}
	}
}

const childEnv = "HEAPSCOPE_TRACEFILE_CHILD"

// childWriter is the body of the child process of TestKilledWriter: it
// writes events to the file named by childEnv and, after each flush, tells
// its parent how many events the file holds, until it is killed.
func childWriter() {
	path := os.Getenv(childEnv)
	w, err := Create(path, testHeader(Sequential, 0), Options{FlushInterval: 20 * time.Millisecond, TimeResolution: 1})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	g := newSynth(1, 100, 4, 500)
	if err := g.defs(w); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	b := make([]event.Event, 1000)
	for n := 0; ; {
		g.fill(b)
		if err := w.Events(b); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		n += len(b)
		if n%10000 == 0 {
			if err := w.Flush(); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			fmt.Println("flushed", n)
		}
	}
}

// TestKilledWriter kills a writing process with SIGKILL and reads what it
// left: every event it had flushed, in order, and nothing corrupt.
func TestKilledWriter(t *testing.T) {
	path := tempPath(t, "killed.hst")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.StdoutPipe()
	check(t, err)
	check(t, cmd.Start())
	sc := bufio.NewScanner(out)
	flushed := 0
	for sc.Scan() && flushed < 200_000 {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "flushed" {
			t.Fatalf("child: %s", sc.Text())
		}
		flushed, _ = strconv.Atoi(f[1])
	}
	check(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()

	rec, warns := readAll(t, path, Window{})
	if len(rec.events) < flushed {
		t.Fatalf("read %d events; the writer had flushed %d", len(rec.events), flushed)
	}
	// They are the writer's events, in order.
	g := newSynth(1, 100, 4, 500)
	want := make([]event.Event, len(rec.events))
	g.fill(want)
	sameEvents(t, rec.events, want)
	if !containsWarning(warns, "no index") {
		t.Errorf("no warning about the missing index: %q", warns)
	}
	t.Logf("flushed %d, read %d; warnings %q", flushed, len(rec.events), warns)
}
