package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
)

func TestSelf(t *testing.T) {
	pid := os.Getpid()
	st, err := ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getppid() || st.State == 'Z' {
		t.Errorf("stat %+v", st)
	}
	exe, err := Exe(pid)
	if err != nil || !strings.HasSuffix(exe, ".test") {
		t.Errorf("Exe = %q, %v", exe, err)
	}
	argv, err := Cmdline(pid)
	if err != nil || len(argv) == 0 {
		t.Errorf("Cmdline = %q, %v", argv, err)
	}
}

func TestNoSuchProcess(t *testing.T) {
	_, err := ReadStat(1 << 30)
	if !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("err = %v", err)
	}
	if Alive(1 << 30) {
		t.Error("Alive for a missing pid")
	}
}

func TestZombieIsNotAlive(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// Not yet reaped: a zombie once it exits.
	for i := 0; i < 1000; i++ {
		st, err := ReadStat(cmd.Process.Pid)
		if err == nil && st.State == 'Z' {
			if Alive(cmd.Process.Pid) {
				t.Error("zombie reported alive")
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("child never became a zombie")
}

func TestModulesOfACProgram(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var mods []string
	for i := 0; i < 1000; i++ {
		ms, err := Modules(cmd.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		mods = mods[:0]
		libc := false
		for _, m := range ms {
			mods = append(mods, m.Path)
			if strings.Contains(m.Path, "libc.so") {
				libc = true
				if len(m.BuildID) != 40 {
					t.Errorf("libc build-id %q", m.BuildID)
				}
				if m.End <= m.Start {
					t.Errorf("bad range %+v", m)
				}
			}
		}
		if libc {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no libc among %q", mods)
}

func TestParseMaps(t *testing.T) {
	in := "7f00-7f10 r-xp 00001000 fd:01 1234   /usr/lib/my lib.so (deleted)\n" +
		"7f10-7f20 rw-p 00000000 00:00 0 \n" +
		"7ffd-7ffe rw-p 00000000 00:00 0                          [stack]\n"
	ms, err := ParseMaps([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0].Path != "/usr/lib/my lib.so" || !ms[0].Exec() || !ms[0].File() ||
		ms[0].Offset != 0x1000 || ms[1].File() || ms[2].Path != "[stack]" {
		t.Errorf("%+v", ms)
	}
	if _, err := ParseMaps([]byte("garbage\n")); err == nil {
		t.Error("garbage accepted")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (a b)) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) { parseStat(1, b) })
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("7f00-7f10 r-xp 00001000 fd:01 1234 /lib/x.so\n"))
	f.Fuzz(func(t *testing.T, b []byte) { ParseMaps(b) })
}

// TestMappedFile: a file mapped by a process of this mount namespace is
// opened through /proc/PID/root and the path its maps give; one whose path
// there is another file's, through /proc/PID/map_files.
func TestMappedFile(t *testing.T) {
	maps, err := ReadMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if !m.Exec() || !m.File() {
			continue
		}
		want := fmt.Sprintf("/proc/%d/root%s", os.Getpid(), m.Path)
		if got := MappedFile(os.Getpid(), m); got != want {
			t.Errorf("%s: %s, want %s", m.Path, got, want)
		}
		m.Inode++ // another file at the same path
		want = fmt.Sprintf("/proc/%d/map_files/%x-%x", os.Getpid(), m.Start, m.End)
		got := MappedFile(os.Getpid(), m)
		if got != want {
			t.Errorf("%s, another inode: %s, want %s", m.Path, got, want)
		}
		if _, err := os.Stat(got); err != nil {
			t.Errorf("%s: %v", got, err)
		}
		return
	}
	t.Fatal("no executable file mapping")
}

// TestChildren: a shell's two background children are its children.
func TestChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & echo ok; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	b := make([]byte, 3)
	if _, err := out.Read(b); err != nil {
		t.Fatal(err)
	}
	kids, err := Children(cmd.Process.Pid)
	if err != nil || len(kids) != 2 {
		t.Fatalf("Children = %v, %v; want the two sleeps", kids, err)
	}
	for _, k := range kids {
		// A child may not have exec'd sleep yet when the shell echoes.
		st, err := ReadStat(k)
		for deadline := time.Now().Add(5 * time.Second); err == nil && st.Comm != "sleep" && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			st, err = ReadStat(k)
		}
		if err != nil || st.Comm != "sleep" {
			t.Errorf("child %d: %+v, %v", k, st, err)
		}
		syscall.Kill(k, syscall.SIGKILL)
	}
}
