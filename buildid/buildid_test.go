package buildid

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// TestLinkerID reads the build-id the linker was told to write, from the
// program, from its separate debug file (the note only as a section), and
// none from a program linked without one.
func TestLinkerID(t *testing.T) {
	const want = "0123456789abcdef0011"
	bin := testutil.MustBuild(t, "churn", testutil.Options{Flags: []string{"-Wl,--build-id=0x" + want}})
	dbg := filepath.Join(t.TempDir(), "churn.debug")
	if out, err := exec.Command(testutil.Tool(t, "objcopy"), "--only-keep-debug", bin, dbg).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	for _, p := range []string{bin, dbg} {
		if id, err := File(p); err != nil || id != want {
			t.Errorf("%s: build-id %q, %v; want %q", p, id, err, want)
		}
	}
	none := testutil.MustBuild(t, "churn", testutil.Options{Flags: []string{"-Wl,--build-id=none"}})
	if id, err := File(none); err != nil || id != "" {
		t.Errorf("%s: build-id %q, %v; want none", none, id, err)
	}
	if _, err := File(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v", err)
	}
}

// TestAgainstReadelf compares the build-id of the system's libc with what
// binutils' readelf -n prints.
func TestAgainstReadelf(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	out, err := exec.Command(testutil.Tool(t, "readelf"), "-n", libc).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", libc, err)
	}
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("readelf -n %s printed no build-id:\n%s", libc, out)
	}
	if id, err := File(libc); err != nil || id != string(m[1]) {
		t.Errorf("%s: build-id %q, %v; readelf says %s", libc, id, err, m[1])
	}
}

// TestBadNotes gives notes whose sizes run past their data:
// no build-id, and no panic.
func TestBadNotes(t *testing.T) {
	bin := testutil.MustBuild(t, "churn", testutil.Options{Flags: []string{"-Wl,--build-id=0xabcdef"}})
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Fatal("no .note.gnu.build-id section")
	}
	for _, c := range []struct {
		name  string
		field int // byte offset in the note header: 0 namesz, 4 descsz
		v     uint32
	}{{"huge descsz", 4, 0xffffffff}, {"huge namesz", 0, 0xfffffff0}, {"descsz past the note", 4, 64}} {
		bad := append([]byte(nil), data...)
		binary.LittleEndian.PutUint32(bad[s.Offset+uint64(c.field):], c.v)
		f, err := elf.NewFile(bytes.NewReader(bad))
		if err != nil {
			t.Fatal(err)
		}
		if id, err := ELF(f); id != "" {
			t.Errorf("%s: build-id %q, %v; want none", c.name, id, err)
		}
	}
}
