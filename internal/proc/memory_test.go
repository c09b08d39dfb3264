package proc

import (
	"os"
	"testing"
)

func TestReadMemory(t *testing.T) {
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS == 0 || m.Anon == 0 || m.File == 0 {
		t.Errorf("this process's memory: %+v, want RSS, Anon and File set", m)
	}
	if sum := m.Anon + m.File + m.Shmem; sum != m.RSS {
		// The kernel sums the three parts into VmRSS.
		t.Errorf("RSS %d, parts sum to %d", m.RSS, sum)
	}
	if _, err := ReadMemory(1 << 30); err == nil {
		t.Error("no error for a PID that does not exist")
	}
}

func TestParseMemory(t *testing.T) {
	m := parseMemory(7, []byte("Name:\tx\nVmRSS:\t    3000 kB\nRssAnon:\t    2000 kB\nRssFile:\t     900 kB\nRssShmem:\t     100 kB\nVmSwap:\t       1 kB\nbad line\nVmRSS2: x\n"))
	if m.PID != 7 || m.RSS != 3000<<10 || m.Anon != 2000<<10 || m.File != 900<<10 || m.Shmem != 100<<10 || m.Swap != 1<<10 {
		t.Errorf("parsed %+v", m)
	}
}
