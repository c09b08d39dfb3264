package ebpf

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/heapscope/heapscope/event"
)

// TestHeaderConstants checks that bpf/heapscope.h, the Go mirrors of its
// constants and package event agree.
func TestHeaderConstants(t *testing.T) {
	f, err := os.Open("bpf/heapscope.h")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defs := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[0] != "#define" {
			continue
		}
		v := strings.Trim(strings.Join(fs[2:], ""), "()")
		if v, ok := strings.CutPrefix(strings.Replace(v, "1ULL<<", "1<<", 1), "1<<"); ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				defs[fs[1]] = 1 << n
			}
			continue
		}
		if i := strings.Index(v, "//"); i >= 0 {
			v = v[:i]
		}
		if n, err := strconv.ParseInt(v, 0, 64); err == nil {
			defs[fs[1]] = n
		}
	}
	want := map[string]int64{
		"MAX_FRAMES":         maxFrames,
		"CTR_LOST_RING_FULL": int64(event.LostRingFull),
		"CTR_LOST_MAP_FULL":  int64(event.LostMapFull),
		"CTR_LOST_OTHER":     int64(event.LostOther),
		"CTR_STACKS_LOST":    ctrStacksLost,
		"CTR_DELIVERED":      ctrDelivered,
		"CTR_UNMATCHED":      ctrUnmatched,
		"NUM_COUNTERS":       numCounters,
		"CTR_LIBS_LOST":      ctrLibsLost,
		"CTR_STACKS_CUT":     ctrStacksCut,
		"CTR_UW_FALLBACK":    ctrUWFallback,
		"CTR_STACKS_BROKEN":  ctrStacksBroken,
		"CTR_STACKS_NOTABLE": ctrStacksNoTable,
		"CTR_STACKS_STORED":  ctrStacksStored,
		"UW_MAX_RANGES":      uwMaxRanges,
		"UW_CHUNK_ENTRIES":   uwChunkEntries,
		"UW_MAX_CHUNKS":      uwMaxChunks,
		"SPILL_NEW":          spillNew,
		"SPILL_OLD":          spillOld,
		"NO_STACK":           0,
		"HEAP_LIBC":          int64(event.HeapLibc),
		"HEAP_EXE":           int64(event.HeapExe),
		"HEAP_MMAP":          int64(event.HeapMmap),
		"HEAP_JEMALLOC":      int64(event.HeapJemalloc),
		"HEAP_TCMALLOC":      int64(event.HeapTcmalloc),
		"HEAP_MIMALLOC":      int64(event.HeapMimalloc),
		"BUCKET_SLOTS":       bucketSlots,
		"PIDX_SHIFT":         pidxShift,
		"MAX_PIDX":           maxPidx,
		"MAX_WINDOWS":        maxWindows,
		"WINDOW_RANGES":      windowRanges,
	}
	for k := event.KindAlloc; k.Valid(); k++ {
		want["KIND_"+strings.ToUpper(k.String())] = int64(k)
	}
	for f := event.FuncMalloc; f <= event.FuncMremap; f++ {
		name := strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(f.String(), "operator "), " ", "_"))
		name = strings.ReplaceAll(name, "[]", "_ARRAY")
		want["FUNC_"+name] = int64(f)
	}
	for _, fam := range []event.Family{event.FamilyMalloc, event.FamilyCalloc, event.FamilyRealloc,
		event.FamilyFree, event.FamilyAligned, event.FamilyCXX, event.FamilyMmap} {
		want["FAMILY_"+strings.ToUpper(fam.String())] = int64(fam)
	}
	for name, v := range want {
		got, ok := defs[name]
		if !ok {
			t.Errorf("%s not defined in heapscope.h", name)
		} else if got != v {
			t.Errorf("%s = %d in heapscope.h, %d in Go", name, got, v)
		}
	}
	if unsafe.Sizeof(heapscopeEvent{}) != eventSize {
		t.Errorf("struct event is %d bytes, decodeEvent reads %d", unsafe.Sizeof(heapscopeEvent{}), eventSize)
	}
	if got, ok := defs["KEY_BUSY"]; !ok || uint64(got) != keyBusy {
		t.Errorf("KEY_BUSY = %#x in heapscope.h (defined: %v), %#x in Go", uint64(got), ok, uint64(keyBusy))
	}
	if unsafe.Sizeof(heapscopeLiveVal{}) != liveValSize || unsafe.Sizeof(heapscopeTotalVal{}) != totalValSize {
		t.Errorf("struct live_val and total_val are %d and %d bytes, the tables read %d and %d",
			unsafe.Sizeof(heapscopeLiveVal{}), unsafe.Sizeof(heapscopeTotalVal{}), liveValSize, totalValSize)
	}
	if unsafe.Sizeof(heapscopeNote{}) != noteSize {
		t.Errorf("struct note is %d bytes, decodeNote reads %d", unsafe.Sizeof(heapscopeNote{}), noteSize)
	}
	if unsafe.Sizeof(heapscopeLib{}) != libSize {
		t.Errorf("struct lib is %d bytes, decodeLib reads %d", unsafe.Sizeof(heapscopeLib{}), libSize)
	}
}
