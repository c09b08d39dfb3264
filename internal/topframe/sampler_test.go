package topframe

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/symbolize"
)

// TestSampler samples a session of top_grow (grow_heap keeps 200,000 bytes
// a second live; churn_site makes a temporary every millisecond): frames
// name the sites by function, sort them as asked, and give grow_heap's
// growth within 10% once two frames are a second apart.
func TestSampler(t *testing.T) {
	cmd := exec.Command(testutil.MustBuild(t, "top_grow", testutil.Options{}), "30")
	s, _ := launch(t, "live-sampler", cmd, "started")
	defer cmd.Process.Signal(os.Interrupt)
	smp := NewSampler(s.Top, time.Second, symbolize.Options{})
	defer smp.Close()
	// The first answer comes before the first event: no growth can be
	// measured from it. The second is the start.
	for i := 0; i < 2; i++ {
		if _, err := smp.Sample(0, 0, ByLive, 10); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(700 * time.Millisecond)
	f, err := smp.Sample(0, 0, ByLive, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Sites) == 0 || !strings.HasPrefix(f.Sites[0].Name(), "grow_heap ") || !f.Sites[0].HasGrowth {
		t.Fatalf("first site %+v", f.Sites)
	}
	if g := f.Sites[0].Growth; g < 180000 || g > 220000 {
		t.Errorf("grow_heap's growth %.0f B/s, want 200,000 ±10%%", g)
	}
	if f.Live < f.Sites[0].Live || len(f.PIDs) != 1 || f.PIDs[0] != uint32(cmd.Process.Pid) {
		t.Errorf("frame: live %d, pids %v", f.Live, f.PIDs)
	}
	f, err = smp.Sample(uint32(cmd.Process.Pid), 0, ByTemporary, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Sites) == 0 || !strings.HasPrefix(f.Sites[0].Name(), "churn_site ") || f.Sites[0].Temporary < 500 || len(f.TIDs) != 1 {
		t.Errorf("by temporaries, pid %d: %+v, threads %v", cmd.Process.Pid, f.Sites, f.TIDs)
	}
}

// launch traces cmd in a session of its own, in a registry of the test's,
// and returns once it has printed the line want, with its standard input
// (the session is stopped when the test ends).
func launch(t *testing.T, name string, cmd *exec.Cmd, want string) (*heapscope.Session, io.WriteCloser) {
	t.Helper()
	t.Setenv(registry.DirEnv, t.TempDir())
	t.Cleanup(testutil.Cleanup)
	stdin, stdout := testutil.Pipes(t, cmd)
	s, err := heapscope.Launch(name, heapscope.Properties{File: filepath.Join(t.TempDir(), name+".hst"),
		FlushInterval: 50 * time.Millisecond}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != want+"\n" {
		t.Fatalf("workload said %q, want %q", line, want)
	}
	return s, stdin
}
