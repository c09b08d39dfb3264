package ebpf

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// liveSink keeps only what TestAggregateGrowingRedis compares: the live
// blocks of a stream, and the last snapshot's.
type liveSink struct {
	mu     sync.Mutex
	live   map[uint64]uint64 // stream: address to size
	snap   *event.Snapshot
	snaps  int
	listed uint64 // live blocks in all the snapshots
	stats  event.Stats
}

func (s *liveSink) Process(event.Process) error { return nil }
func (s *liveSink) Exit(event.Exit) error       { return nil }
func (s *liveSink) Module(event.Module) error   { return nil }
func (s *liveSink) Stack(event.Stack) error     { return nil }
func (s *liveSink) Note(event.Note) error       { return nil }
func (s *liveSink) Stats(st event.Stats) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = st
	return nil
}

func (s *liveSink) Snapshot(sn event.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap, s.snaps = &sn, s.snaps+1
	s.listed += uint64(len(sn.Live))
	return nil
}

func (s *liveSink) Events(evs []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		switch e.Kind {
		case event.KindFree:
			delete(s.live, e.Addr)
		case event.KindRealloc:
			if e.OldAddr != 0 && (e.Addr != 0 || e.Size == 0) {
				delete(s.live, e.OldAddr)
			}
			fallthrough
		case event.KindAlloc:
			if e.Addr != 0 {
				s.live[e.Addr] = e.Size
			}
		}
	}
	return nil
}

// liveBytes is what is live of what the session saw allocated.
func (s *liveSink) liveBytes() (bytes uint64, blocks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap != nil {
		for _, b := range s.snap.Live {
			bytes += b.Size
		}
		return bytes, len(s.snap.Live)
	}
	for _, n := range s.live {
		bytes += n
	}
	return bytes, len(s.live)
}

// redisUsedMemory returns redis's INFO memory used_memory.
func redisUsedMemory(t *testing.T, cli, sock string) uint64 {
	out, err := exec.Command(cli, "-s", sock, "info", "memory").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in %s", out)
	return 0
}

// TestAggregateGrowingRedis attaches to redis-server while it SETs 200,000
// new keys (600,000 blocks that stay live, more than aggregate mode's
// tables hold by default), in stream mode and in aggregate mode: aggregate
// mode loses nothing and its live heap is within 1% of stream mode's, both
// below redis's own count of what it grew by (INFO used_memory counts
// jemalloc's size classes, not the sizes asked). Its snapshots list fewer
// blocks than the calls they stand for. (Before: 224,411 allocations lost
// for want of room, 12% less live heap, 61 snapshots of every live block.)
func TestAggregateGrowingRedis(t *testing.T) {
	redis := testutil.Tool(t, "redis-server")
	cli := testutil.Tool(t, "redis-cli")
	dir := t.TempDir()
	sets := filepath.Join(dir, "sets")
	f, err := os.Create(sets)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	const keys = 200_000
	for i := 0; i < keys; i++ {
		fmt.Fprintf(bw, "SET key:%d value-%d-xxxxxxxxxxxxxxxx\r\n", i, i)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	run := func(mode event.CaptureMode) (live uint64, blocks int, grew uint64, s *liveSink, st event.Stats) {
		sock := filepath.Join(dir, mode.String()+".sock")
		srv := exec.Command(redis, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { srv.Process.Kill(); srv.Wait() }()
		for i := 0; i < 500; i++ {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		before := redisUsedMemory(t, cli, sock)
		s = &liveSink{live: map[uint64]uint64{}}
		// A ring of 64 MiB: stream mode's losses under a loaded CI
		// (at load > 10 the default's 4 MiB lost events) are not what
		// this test is about.
		tr := newTracer(t, Config{Mode: mode, FlushInterval: time.Second, RingSize: 64 << 20}, s)
		if err := tr.Attach(srv.Process.Pid); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(sets)
		if err != nil {
			t.Fatal(err)
		}
		pipe := exec.Command(cli, "-s", sock, "--pipe")
		pipe.Stdin = in
		if out, err := pipe.CombinedOutput(); err != nil {
			t.Fatalf("redis-cli --pipe: %v\n%s", err, out)
		}
		in.Close()
		grew = redisUsedMemory(t, cli, sock) - before
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		live, blocks = s.liveBytes()
		return live, blocks, grew, s, tr.Stats()
	}
	sLive, sBlocks, sGrew, _, sStats := run(event.Stream)
	aLive, aBlocks, aGrew, agg, aStats := run(event.Aggregate)
	t.Logf("stream: %d bytes live in %d blocks (redis grew %d), stats %+v", sLive, sBlocks, sGrew, sStats)
	t.Logf("aggregate: %d bytes live in %d blocks (redis grew %d), %d snapshots, stats %+v", aLive, aBlocks, aGrew, agg.snaps, aStats)
	if sStats.TotalLost() != 0 || aStats.TotalLost() != 0 {
		t.Errorf("lost: stream %d, aggregate %d; want none", sStats.TotalLost(), aStats.TotalLost())
	}
	if d := float64(aLive) - float64(sLive); d > 0.01*float64(sLive) || -d > 0.01*float64(sLive) {
		t.Errorf("aggregate mode's live heap %d, stream mode's %d: more than 1%% apart", aLive, sLive)
	}
	for _, c := range []struct {
		mode       string
		live, grew uint64
	}{{"stream", sLive, sGrew}, {"aggregate", aLive, aGrew}} {
		if c.live > c.grew || float64(c.live) < 0.7*float64(c.grew) {
			t.Errorf("%s: %d bytes live, redis says it grew by %d", c.mode, c.live, c.grew)
		}
	}
	if aBlocks < 3*keys {
		t.Errorf("aggregate: %d blocks live for %d keys", aBlocks, keys)
	}
	// The final snapshot is due whatever its size; the others are taken
	// as the calls since the last reach the blocks it listed.
	if periodic := agg.listed - uint64(aBlocks); periodic > aStats.Delivered {
		t.Errorf("aggregate: the periodic snapshots list %d blocks, more than the %d calls", periodic, aStats.Delivered)
	}
}
