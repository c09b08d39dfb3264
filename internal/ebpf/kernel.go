package ebpf

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelAddsEntryFrame reports whether perf's user stack walk adds the word
// at the stack pointer when a uprobe is on a push %rbp or endbr64 (commit
// "perf,x86: avoid missing caller address in stack traces captured in
// uprobe", Linux 6.11).
var kernelAddsEntryFrame = kernelAtLeast(6, 11)

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma > major || ma == major && mi >= minor
}
