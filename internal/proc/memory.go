package proc

import (
	"bytes"
	"os"
	"strconv"

	"github.com/heapscope/heapscope/event"
)

// ReadMemory reads a process's resident memory from /proc/PID/status, as
// the kernel counts it: RSS and its anonymous, file-backed and shared
// parts, and the swap, in bytes. Time is left for the caller to set.
func ReadMemory(pid int) (event.Memory, error) {
	b, err := os.ReadFile(path(pid, "status"))
	if err != nil {
		return event.Memory{}, wrap(pid, err)
	}
	return parseMemory(pid, b), nil
}

func parseMemory(pid int, b []byte) event.Memory {
	m := event.Memory{PID: uint32(pid)}
	fields := map[string]*uint64{"VmRSS": &m.RSS, "RssAnon": &m.Anon, "RssFile": &m.File, "RssShmem": &m.Shmem, "VmSwap": &m.Swap}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		dst := fields[string(k)]
		if dst == nil {
			continue
		}
		// "  1234 kB"
		v = bytes.TrimSpace(v)
		v = bytes.TrimSuffix(v, []byte(" kB"))
		if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil {
			*dst = n << 10
		}
	}
	return m
}
