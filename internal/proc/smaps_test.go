package proc

import (
	"os"
	"testing"
)

func TestParseSmaps(t *testing.T) {
	in := `55d0c8a00000-55d0c8a21000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
Rss:                  12 kB
Pss:                  10 kB
Shared_Clean:          0 kB
Shared_Dirty:          4 kB
Private_Clean:         0 kB
Private_Dirty:         8 kB
Anonymous:            12 kB
Swap:                  4 kB
SwapPss:               4 kB
VmFlags: rd wr mr mw me ac sd
7f00-7f10 r-xp 00001000 fd:01 1234   /usr/lib/my lib.so
Size:                  4 kB
Rss:                   4 kB
THPeligible:    0
`
	sm, err := ParseSmaps([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(sm) != 2 || sm[0].Path != "[heap]" || sm[0].Size != 132<<10 || sm[0].Rss != 12<<10 || sm[0].Pss != 10<<10 ||
		sm[0].SharedDirty != 4<<10 || sm[0].PrivateDirty != 8<<10 || sm[0].Anonymous != 12<<10 || sm[0].Swap != 4<<10 ||
		sm[1].Path != "/usr/lib/my lib.so" || sm[1].Rss != 4<<10 {
		t.Errorf("%+v", sm)
	}
	if _, err := ParseSmaps([]byte("55d0-55d1 rw-p 00000000 00:00 0\nRss: lots kB\n")); err == nil {
		t.Error("a malformed counter accepted")
	}
}

// TestSmapsSelf: this process's smaps add up to its smaps_rollup, and the
// pages pagemap says are resident in its writable anonymous mappings are
// what smaps counts there.
func TestSmapsSelf(t *testing.T) {
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // resident
	}
	sm, err := ReadSmaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	roll, err := ReadSmapsRollup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var rss, resident, anon uint64
	for _, m := range sm {
		rss += m.Rss
		if m.File() || m.Rss == 0 || m.Perms[1] != 'w' || m.Path == "[vsyscall]" {
			continue
		}
		r, err := ReadResident(os.Getpid(), m.Start, m.End)
		if err != nil {
			t.Fatal(err)
		}
		resident += r.Bytes(m.Start, m.End)
		anon += m.Rss
	}
	t.Logf("rss %d, rollup %d; anonymous rss %d, resident by pagemap %d", rss, roll.Rss, anon, resident)
	// The Go runtime runs on: allow it a few pages.
	if d := int64(rss) - int64(roll.Rss); d > 1<<20 || d < -1<<20 {
		t.Errorf("smaps add up to %d, smaps_rollup says %d", rss, roll.Rss)
	}
	if d := int64(resident) - int64(anon); d > 1<<20 || d < -1<<20 {
		t.Errorf("pagemap counts %d resident bytes in the anonymous mappings, smaps %d", resident, anon)
	}
	if anon < 64<<20 {
		t.Errorf("the 64 MiB written are not in the anonymous RSS (%d)", anon)
	}
	b[0] = 2
}

func TestResidentBytes(t *testing.T) {
	r := &Resident{Start: 0x10000, End: 0x10000 + 200*4096, PageSize: 4096, bits: make([]uint64, 4)}
	for _, p := range []uint64{0, 1, 63, 64, 65, 130, 199} {
		r.bits[p/64] |= 1 << (p % 64)
	}
	for _, c := range []struct{ lo, hi, want uint64 }{
		{0x10000, 0x10001, 1},
		{0x10000 + 4095, 0x10000 + 4097, 2},
		{0x10000, 0x10000 + 200*4096, 7 * 4096},
		{0x10000 + 2*4096, 0x10000 + 63*4096, 0},
		{0x10000 + 62*4096 + 100, 0x10000 + 66*4096 - 100, 2*4096 + 4096 - 100},
		{0, 0x10000, 0},
		{0x10000 + 199*4096, 1 << 40, 4096},
	} {
		if got := r.Bytes(c.lo, c.hi); got != c.want {
			t.Errorf("Bytes(%#x, %#x) = %d, want %d", c.lo, c.hi, got, c.want)
		}
	}
}

func FuzzParseSmaps(f *testing.F) {
	f.Add([]byte("7f00-7f10 rw-p 00000000 00:00 0\nRss: 4 kB\nPss: 4 kB\nVmFlags: rd\n"))
	f.Fuzz(func(t *testing.T, b []byte) { ParseSmaps(b) })
}
