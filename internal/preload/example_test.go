//go:build linux && amd64

package preload_test

import (
	"fmt"
	"log"
	"os/exec"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/preload"
)

// allocs counts the allocation calls it is given.
type allocs struct {
	event.Sink
	n int
}

func (a *allocs) Events(evs []event.Event) error {
	for _, e := range evs {
		if e.Kind == event.KindAlloc {
			a.n++
		}
	}
	return nil
}

// Trace a command from its first allocation to its exit.
func ExampleCollector() {
	sink := &allocs{Sink: event.Discard}
	c, err := preload.New(preload.Config{}, sink)
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "echo hello")
	if err := c.Prepare(cmd); err != nil {
		log.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil {
		log.Fatal(err)
	}
	c.Exited(cmd.Process.Pid, cmd.ProcessState.ExitCode(), 0)
	if err := c.Close(); err != nil {
		log.Fatal(err)
	}
	st := c.Stats()
	fmt.Printf("%s", out)
	fmt.Println("allocations seen:", sink.n > 0, "lost:", st.TotalLost())
	// Output:
	// hello
	// allocations seen: true lost: 0
}
