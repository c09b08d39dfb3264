package testutil

import (
	"os"
	"testing"
)

// SharedDir returns a new folder every user may write, sticky like /tmp,
// removed when the test ends: where the security tests let another user
// plant files. It is made under os.TempDir, not t.TempDir, whose parent
// other users cannot enter.
func SharedDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "heapscope-shared-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		tb.Fatal(err)
	}
	return dir
}
