package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestRunOutputPlantedByAnotherUser: in a folder another user can write, that
// user plants a symlink to a root file and a world-writable file of theirs
// at the names root's `heapscope run` will write. Neither is written
// through: run refuses both, naming --overwrite; with --overwrite each name
// gets a new root-owned 0600 file and the link's target and the planted
// inode are untouched.
func TestRunOutputPlantedByAnotherUser(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	rootDir := t.TempDir()
	victim := filepath.Join(rootDir, "victim")
	if err := os.WriteFile(victim, []byte("root's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The user's folder, where root runs heapscope.
	dir := filepath.Join(t.TempDir(), "user")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chown(dir, int(uid), int(gid)))
	link := filepath.Join(dir, "link.hst")
	must(t, os.Symlink(victim, link))
	must(t, os.Lchown(link, int(uid), int(gid)))
	planted := filepath.Join(dir, "planted.hst")
	must(t, os.WriteFile(planted, nil, 0o666))
	must(t, os.Chown(planted, int(uid), int(gid)))
	must(t, os.Chmod(planted, 0o666))
	keep := filepath.Join(dir, "keep") // the planter's way to the inode
	must(t, os.Link(planted, keep))

	for _, out := range []string{link, planted} {
		code, stderr := exitCode(t, cli(t, "run", "-q", "-o", out, "--", ctor))
		if code == 0 || !strings.Contains(stderr, "--overwrite") {
			t.Errorf("run -o %s: exit %d, %q; want a refusal naming --overwrite", filepath.Base(out), code, stderr)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's file" {
		t.Fatalf("the symlink's target was written: %d bytes", len(b))
	}
	if b, _ := os.ReadFile(keep); len(b) != 0 {
		t.Fatalf("the planted file received %d bytes of root's trace", len(b))
	}

	for _, out := range []string{link, planted} {
		if code, stderr := exitCode(t, cli(t, "run", "-q", "--overwrite", "-o", out, "--", ctor)); code != 0 {
			t.Fatalf("run --overwrite -o %s: exit %d, %s", filepath.Base(out), code, stderr)
		}
		fi, err := os.Lstat(out)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || st.Uid != 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after --overwrite: %v, uid %d; want a regular file of root's, 0600", filepath.Base(out), fi.Mode(), st.Uid)
		}
		if tr := readTrace(t, out); tr.allocs[7777] != 1 {
			t.Errorf("%s: allocations by size %v", filepath.Base(out), tr.allocs)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's file" {
		t.Errorf("--overwrite wrote through the symlink: its target holds %d bytes", len(b))
	}
	if b, _ := os.ReadFile(keep); len(b) != 0 {
		t.Errorf("--overwrite wrote into the planted inode: %d bytes", len(b))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
