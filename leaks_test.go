package heapscope

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/testutil/tracetest"
)

// launchPlanted launches scan_planted in a session and waits for its
// ready line; the returned func lets it end and waits for the session.
func launchPlanted(t *testing.T, props Properties) (*Session, func()) {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "scan_planted", testutil.Options{}))
	in, out := testutil.Pipes(t, cmd)
	name := fmt.Sprintf("leaks-%d", time.Now().UnixNano())
	s, err := Launch(name, props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(out)
	testutil.ReadUntil(t, br, "scan_planted", func(l string) bool { return strings.HasPrefix(l, "ready ") })
	end := func() {
		io.WriteString(in, "go\n")
		go io.Copy(io.Discard, br)
		s.Wait()
	}
	t.Cleanup(func() { s.Stop(); cmd.Process.Kill() })
	return s, end
}

// TestLeaksSession: Session.Leaks checks the launched program while it
// runs, the verdict reaches top's totals (the LOST of each site), and at
// its exit the session checks it again (LeakCheckExit by default): two
// verdicts in the trace, the second at exit.
func TestLeaksSession(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.hst")
	s, end := launchPlanted(t, Properties{File: file})
	if _, err := s.Top(TopQuery{Client: "t"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Leaks(LeaksQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Processes) != 1 {
		t.Fatalf("%+v", r)
	}
	p := r.Processes[0]
	const lost = 3032 + 3048 + 3064 + 3080 + 3096 + 3112 + 3128 + 3144 + 3272 + 3256 // scan_planted's lost blocks
	if p.Error != "" || !p.Complete || p.Partial || p.Classes.Lost().Bytes != lost || p.Paused <= 0 || len(r.Modules) == 0 {
		t.Errorf("check: %+v", p)
	}
	top, err := s.Top(TopQuery{Client: "t", N: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !top.Scanned || top.Totals.LostBytes != lost {
		t.Errorf("top after the check: scanned %v, lost %d, want %d", top.Scanned, top.Totals.LostBytes, lost)
	}
	end()
	if v := testutil.NotesOf[event.Verdict](tracetest.Notes(t, file)); len(v) != 2 || v[0].AtExit || !v[1].AtExit || v[1].Pause <= 0 {
		t.Errorf("verdicts %+v", v)
	}
}

// TestLeaksRefused: a session that samples cannot check (it does not know
// every block), a process it does not trace is no such process, and a
// leak check at exit with sampling is invalid properties.
func TestLeaksRefused(t *testing.T) {
	s, end := launchPlanted(t, Properties{File: filepath.Join(t.TempDir(), "s.hst"), Sample: 64 * KiB})
	defer end()
	if _, err := s.Leaks(LeaksQuery{}); !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("a sampled session's check: %v", err)
	}
	if err := (Properties{File: "x.hst", Sample: 64 * KiB, LeakCheck: LeakCheckExit}).Validate(); !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("LeakCheckExit with Sample: %v", err)
	}
	if err := (Properties{File: "x.hst", LeakCheck: "sometimes"}).Validate(); !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("an unknown LeakCheck: %v", err)
	}
	s2, end2 := launchPlanted(t, Properties{File: filepath.Join(t.TempDir(), "s2.hst"), LeakCheck: LeakCheckOff})
	defer end2()
	if _, err := s2.Leaks(LeaksQuery{PID: 1}); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("pid 1: %v", err)
	}
}

// TestLeaksExitBeforeVerdict: a program that ends as soon as the check at
// its exit lets it go (here the check waits, before it classifies, until the
// program's end has reached the session) still has its blocks classified in
// the trace: its Exit record waits for the verdict. Before, the Exit came
// first, the reader took the process's blocks out of the heap there, and the
// verdict that followed applied to none of them (seen under load: a gate
// that classified none of a program's blocks).
func TestLeaksExitBeforeVerdict(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.hst")
	var sess atomic.Pointer[Session]
	testHookResumed = func(pid int) {
		// Until the session's sink has the program's Exit (kept, or
		// written).
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			sk := sess.Load().sink
			sk.mu.Lock()
			in := !sk.running[uint32(pid)] || len(sk.heldExits[uint32(pid)]) > 0
			sk.mu.Unlock()
			if in {
				return
			}
		}
		t.Error("the program's Exit did not reach the session in 20 s")
	}
	t.Cleanup(func() { testHookResumed = nil })
	s, end := launchPlanted(t, Properties{File: file})
	sess.Store(s)
	end()
	m := analyze.New(analyze.Options{})
	tracetest.Replay(t, file, m)
	vs := m.Profile().Verdicts
	if len(vs) != 1 || !vs[0].AtExit || vs[0].Listed == 0 || vs[0].Applied != vs[0].Listed {
		t.Fatalf("verdicts %+v: want the one at exit, applied to every block it lists", vs)
	}
}
