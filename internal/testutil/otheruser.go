package testutil

import (
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// OtherUserName is the unprivileged user the security tests act as.
const OtherUserName = "heapscope-test"

var (
	userOnce sync.Once
	userUID  uint32
	userGID  uint32
	userErr  error
	selfOnce sync.Once
	selfPath string
	selfErr  error
)

// OtherUser returns the uid and gid of an unprivileged user, created with
// useradd when missing, for tests that play a second local user against a
// root session. It needs root: not being root fails the test (CI runs as
// root), since skipping would hide the security tests.
func OtherUser(tb testing.TB) (uid, gid uint32) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatalf("this test plays a second user against root: run it as root")
	}
	userOnce.Do(func() {
		u, err := user.Lookup(OtherUserName)
		if err != nil {
			out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OtherUserName).CombinedOutput()
			if aerr != nil {
				userErr = &exec.Error{Name: "useradd " + string(out), Err: aerr}
				return
			}
			if u, err = user.Lookup(OtherUserName); err != nil {
				userErr = err
				return
			}
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		userUID, userGID = uint32(uid), uint32(gid)
	})
	if userErr != nil {
		tb.Fatal(userErr)
	}
	return userUID, userGID
}

// AsOtherUser sets cmd to run as OtherUser.
func AsOtherUser(tb testing.TB, cmd *exec.Cmd) {
	tb.Helper()
	uid, gid := OtherUser(tb)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
}

// SelfForOtherUser returns a copy of the running test binary that OtherUser
// can execute (go test builds it in a folder only root may enter), for tests
// that re-execute themselves as that user.
func SelfForOtherUser(tb testing.TB) string {
	tb.Helper()
	selfOnce.Do(func() {
		src, err := os.Executable()
		if err != nil {
			selfErr = err
			return
		}
		dir, err := os.MkdirTemp("", "heapscope-self-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			selfErr = err
			return
		}
		selfPath = filepath.Join(dir, filepath.Base(src))
		selfErr = copyFile(src, selfPath, 0o755)
		mu.Lock()
		extra = append(extra, dir)
		mu.Unlock()
	})
	if selfErr != nil {
		tb.Fatal(selfErr)
	}
	return selfPath
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
