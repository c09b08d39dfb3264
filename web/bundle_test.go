package web

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The committed bundle is what the TypeScript sources make: a change to
// web/ui/src needs `go generate ./web/` and the new app.js committed.
func TestBundleFresh(t *testing.T) {
	out := filepath.Join(t.TempDir(), "app.js")
	cmd := exec.Command("go", "run", "./internal/bundle", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bundling: %v\n%s", err, b)
	}
	fresh, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("ui", "dist", "app.js"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Errorf("ui/dist/app.js is stale: run go generate ./web/ and commit it")
	}
}
