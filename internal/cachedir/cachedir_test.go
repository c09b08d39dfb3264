package cachedir

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"": -1, "0": 0, "512": 512, "4k": 4 << 10, "512M": 512 << 20, "2G": 2 << 30, "1T": 1 << 40} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"-1", "1X", "G", "9999999999T", "1.5G"} {
		if _, err := ParseSize(s); !errors.Is(err, ErrBadSize) {
			t.Errorf("ParseSize(%q): %v, want ErrBadSize", s, err)
		}
	}
}

// Trim touches nothing in a folder others can write, or through a
// symbolic link to a folder.
func TestTrimUntrusted(t *testing.T) {
	names := Names{File: regexp.MustCompile(`\.c$`)}
	dir := t.TempDir()
	file := filepath.Join(dir, "a.c")
	if err := os.WriteFile(file, []byte("cached"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := Trim(dir, names, "", 0, 0); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a folder others can write: %v, want ErrUntrusted", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := Trim(link, names, "", 0, 0); err == nil {
		t.Error("a folder through a link was trimmed")
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the file: %v", err)
	}
	if err := Trim(dir, names, "", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("a limit of 0 kept a file not just written")
	}
}
