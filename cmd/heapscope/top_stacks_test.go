package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/topframe"
)

// TestTopShowsStacksCut checks that top's header names the events whose
// stack was lost or cut (issue 28 item 2: in top too), and says nothing of
// them when there are none.
func TestTopShowsStacksCut(t *testing.T) {
	f := &topframe.Frame{Time: time.Now(), HasStats: true,
		Stats: event.Stats{StacksLost: 3, StacksCut: 1234, StacksCutDepth: 34, StacksCutNoTable: 1200}}
	var b bytes.Buffer
	writePlainFrame(&b, "s", "running", f, nil, 10)
	head := strings.SplitN(b.String(), "\n", 2)[0]
	if !strings.Contains(head, "stacks lost 3") || !strings.Contains(head, "stacks cut 1,234 (depth 34, no table 1,200)") {
		t.Errorf("header %q does not name the stacks lost and cut", head)
	}
	f.Stats = event.Stats{}
	b.Reset()
	writePlainFrame(&b, "s", "running", f, nil, 10)
	if strings.Contains(b.String(), "stacks") {
		t.Errorf("header %q names stacks when none were lost or cut", b.String())
	}
}
