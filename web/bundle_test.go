package web

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// The committed bundle is what the TypeScript sources make: a change to
// web/ui/src needs `go generate ./web/` and the new app.js committed.
func TestBundleFresh(t *testing.T) {
	out := filepath.Join(t.TempDir(), "app.js")
	cmd := exec.Command("go", "run", "./internal/bundle", "-tsc=false", "-o", out)
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

// The committed TypeScript types of the API are what the Go types of the
// answers make: a change to an answer needs `go generate ./web/`.
func TestAPITypesFresh(t *testing.T) {
	out := filepath.Join(t.TempDir(), "apitypes.ts")
	cmd := exec.Command("go", "run", "./internal/tsgen", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsgen: %v\n%s", err, b)
	}
	fresh, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("ui", "src", "apitypes.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Errorf("ui/src/apitypes.ts is stale: run go generate ./web/ and commit it")
	}
}

// The page's TypeScript type-checks (tsc --noEmit, the TypeScript that
// ui/package-lock.json pins) against the generated API types. It needs
// node and npm (and the npm registry once, for TypeScript).
func TestPageTypeChecks(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		testutil.Tool(t, tool)
	}
	cmd := exec.Command("go", "run", "./internal/bundle", "-check")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
}
