package tracefile

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file that is not a trace is named when its first bytes tell what it
// is: a heaptrack trace, plain or compressed.
func TestForeignFile(t *testing.T) {
	ht := []byte("v 10400 3\nX sqlite3 :memory:\n")
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(ht)
	w.Close()
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"plain", ht, "it is a heaptrack trace:"},
		{"gzip", gz.Bytes(), "it is a heaptrack trace, compressed with gzip"},
		{"text", []byte("hello, world, this is not a trace at all\n"), ""},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, c.b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a heapscope trace file") ||
			c.want != "" && !strings.Contains(err.Error(), c.want) || c.want == "" && strings.Contains(err.Error(), "heaptrack") {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
