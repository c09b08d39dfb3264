package launch

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/proc"
)

func TestStartHeldStopsBeforeTheProgramRuns(t *testing.T) {
	var out bytes.Buffer
	cmd := exec.Command("/bin/echo", "ran")
	cmd.Stdout = &out
	var sawState byte
	var sawMaps []string
	err := StartHeld(cmd, func(pid int) error {
		st, err := proc.ReadStat(pid)
		if err != nil {
			return err
		}
		sawState = st.State
		maps, err := proc.ReadMaps(pid)
		if err != nil {
			return err
		}
		for _, m := range maps {
			if m.File() {
				sawMaps = append(sawMaps, m.Path)
			}
		}
		if out.Len() != 0 {
			t.Errorf("output before release: %q", out.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if sawState != 't' && sawState != 'T' {
		t.Errorf("state while held = %c, want traced-stop", sawState)
	}
	for _, m := range sawMaps {
		if strings.Contains(m, "libc.so") {
			t.Errorf("libc already mapped at the exec stop: %v", sawMaps)
		}
	}
	if out.String() != "ran\n" {
		t.Errorf("output %q", out.String())
	}
}

func TestStartHeldReadyFails(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	want := errors.New("nope")
	start := time.Now()
	if err := StartHeld(cmd, func(int) error { return want }); !errors.Is(err, want) {
		t.Fatalf("err = %v", err)
	}
	if proc.Alive(cmd.Process.Pid) {
		t.Error("child still alive")
	}
	if time.Since(start) > 20*time.Second {
		t.Error("child was not killed")
	}
}

func TestStartHeldMissingProgram(t *testing.T) {
	cmd := exec.Command("/no/such/program")
	if err := StartHeld(cmd, func(int) error { return nil }); err == nil {
		t.Error("started a missing program")
	}
}

func TestStatus(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 7")
	cmd.Run()
	if s, sig := Status(cmd.ProcessState); s != 7 || sig != 0 {
		t.Errorf("exit 7: %d, %d", s, sig)
	}
	cmd = exec.Command("/bin/sh", "-c", "kill -TERM $$")
	cmd.Run()
	if s, sig := Status(cmd.ProcessState); s != 128+15 || sig != 15 {
		t.Errorf("killed: %d, %d", s, sig)
	}
}
