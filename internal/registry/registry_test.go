package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) {
	// Re-executed as a child that takes a name and waits to be killed.
	if name := os.Getenv("REGISTRY_TEST_HOLD"); name != "" {
		e, err := Acquire(os.Getenv("REGISTRY_TEST_DIR"), Info{Name: name, Owner: os.Getpid()})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("held")
		time.Sleep(time.Minute)
		e.Release()
		os.Exit(0)
	}
	// Re-executed as another user: print what Dir says.
	if os.Getenv("REGISTRY_TEST_DIRFOR") != "" {
		d, err := Dir()
		out := struct {
			Dir    string
			Err    string
			Denied bool
			Found  bool
		}{Dir: d}
		if err != nil {
			out.Err, out.Denied = err.Error(), errors.Is(err, errs.ErrAccessDenied)
		} else if os.Getenv("REGISTRY_TEST_ACQUIRE") != "" {
			// A session in it, found by its name.
			if e, err := Acquire(d, Info{Name: "in-fallback", Owner: os.Getpid()}); err == nil {
				info, err := Lookup(d, "IN-FALLBACK")
				out.Found = err == nil && info.Owner == os.Getpid()
				e.Release()
			}
		}
		json.NewEncoder(os.Stdout).Encode(out)
		os.Exit(0)
	}
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

func TestAcquireUniqueCaseInsensitive(t *testing.T) {
	dir := t.TempDir()
	e, err := Acquire(dir, Info{Name: "MySession", Owner: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir, Info{Name: "mysession", Owner: os.Getpid()})
	if !errors.Is(err, errs.ErrAlreadyExists) {
		t.Fatalf("second acquire: %v", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("error does not name the owner: %v", err)
	}
	info, err := Lookup(dir, "MYSESSION")
	if err != nil || info.Name != "MySession" {
		t.Errorf("Lookup = %+v, %v", info, err)
	}
	if err := e.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := Lookup(dir, "MySession"); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("Lookup after release: %v", err)
	}
	e2, err := Acquire(dir, Info{Name: "mysession"})
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	e2.Release()
}

func TestNames(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("é", MaxNameLen) // 1024 characters, 2048 bytes: allowed
	e, err := Acquire(dir, Info{Name: long})
	if err != nil {
		t.Fatalf("name of %d characters: %v", MaxNameLen, err)
	}
	e.Release()
	if _, err := Acquire(dir, Info{Name: long + "x"}); !errors.Is(err, errs.ErrNameTooLong) {
		t.Errorf("too long: %v", err)
	}
	if _, err := Acquire(dir, Info{Name: ""}); !errors.Is(err, errs.ErrInvalidFlags) {
		t.Errorf("empty: %v", err)
	}
}

func TestDeadOwnerDoesNotHoldName(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REGISTRY_TEST_HOLD=crashy", "REGISTRY_TEST_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf[:4]) != "held" {
		t.Fatalf("child said %q, %v", buf, err)
	}
	if _, err := Acquire(dir, Info{Name: "CRASHY"}); !errors.Is(err, errs.ErrAlreadyExists) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Errorf("while the owner lives: %v", err)
	}
	infos, err := List(dir)
	if err != nil || len(infos) != 1 || infos[0].Owner != cmd.Process.Pid {
		t.Errorf("List = %+v, %v", infos, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	infos, err = List(dir)
	if err != nil || len(infos) != 0 {
		t.Errorf("List after the owner died = %+v, %v", infos, err)
	}
	e, err := Acquire(dir, Info{Name: "crashy"})
	if err != nil {
		t.Fatalf("name still held after its owner died: %v", err)
	}
	e.Release()
}

func TestConcurrentAcquireOneWins(t *testing.T) {
	dir := t.TempDir()
	for round := 0; round < 50; round++ {
		results := make(chan *Entry, 8)
		for i := 0; i < 8; i++ {
			go func() {
				e, err := Acquire(dir, Info{Name: "race"})
				if err != nil && !errors.Is(err, errs.ErrAlreadyExists) {
					t.Error(err)
				}
				results <- e
			}()
		}
		won := 0
		var held []*Entry
		for i := 0; i < 8; i++ {
			if e := <-results; e != nil {
				won++
				held = append(held, e)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d winners", round, won)
		}
		for _, e := range held {
			e.Release()
		}
	}
}
