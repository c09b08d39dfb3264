package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/internal/errs"
)

func TestCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	srv, err := Listen(path, func(op string, args json.RawMessage) (any, error) {
		switch op {
		case "echo":
			var v map[string]int
			if err := json.Unmarshal(args, &v); err != nil {
				return nil, err
			}
			v["n"]++
			return v, nil
		case "missing":
			return nil, fmt.Errorf("pid 42: %w", errs.ErrNoSuchProcess)
		}
		return nil, fmt.Errorf("unknown op %q", op)
	})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]int
	if err := Call(path, "echo", map[string]int{"n": 1}, &out); err != nil || out["n"] != 2 {
		t.Errorf("echo: %v, %v", out, err)
	}
	err = Call(path, "missing", nil, nil)
	if !errors.Is(err, errs.ErrNoSuchProcess) || err.Error() != "pid 42: no such process" {
		t.Errorf("missing: %v", err)
	}
	if err := Call(path, "bogus", nil, nil); err == nil || errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("bogus: %v", err)
	}
	srv.Close()
	if err := Call(path, "echo", nil, nil); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("after close: %v", err)
	}
}
