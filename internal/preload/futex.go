//go:build linux && amd64

package preload

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared (not private) futexes: the words live in memory shared with other
// processes.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(n), 0, 0, 0)
}
