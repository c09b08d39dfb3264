package inject

import (
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/unwind"
)

func TestTimingParts(t *testing.T) {
	tg := startWorkload(t, 1, testutil.Options{})
	maps, _ := proc.ReadMaps(tg.pid)
	t0 := time.Now()
	l, err := findLibc(tg.pid, maps)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("findLibc %v (%d unsafe spans)", time.Since(t0), len(l.unsafe))
	t0 = time.Now()
	tb, err := unwind.Build(l.path)
	t.Logf("unwind.Build(libc) %v %v entries=%d", time.Since(t0), err, len(tb.Entries))
}
