package heapscope_test

import (
	"fmt"
	"os/exec"
	"sync/atomic"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/testutil"
)

// Hooks see every allocation, reallocation and free of a session live, as
// the GDK's XMemSetWin32HeapTrackingHooks does. Here a program is launched
// under the preload provider (no privileges needed), with hooks installed
// before it starts, so that even the allocation in its constructor is seen.
func Example_hooks() {
	// session_ctor allocates 7,777 bytes in a constructor, then 10 × 4,321
	// bytes in main, each freed at once.
	program, err := testutil.Build("session_ctor", testutil.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var ctor, blocks, frees atomic.Int64
	props := heapscope.Properties{
		LogFileMode: heapscope.RealTime, // no file: events reach only the hooks
		Hooks: heapscope.Hooks{
			OnAlloc: func(c *heapscope.Call) {
				switch c.Size {
				case 7777:
					ctor.Add(1)
				case 4321:
					blocks.Add(1)
				}
			},
			OnFree: func(c *heapscope.Call) {
				if !c.Unmatched {
					frees.Add(1)
				}
			},
		},
	}
	s, err := heapscope.Launch("example-hooks", props, exec.Command(program), heapscope.DefaultStacks)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Wait() // the session ends with the program
	fmt.Printf("constructor: %d, main: %d blocks of 4321 bytes, exit status %d\n", ctor.Load(), blocks.Load(), s.ExitStatus())
	fmt.Println("matched frees ≥ 10:", frees.Load() >= 10)
	// Output:
	// constructor: 1, main: 10 blocks of 4321 bytes, exit status 0
	// matched frees ≥ 10: true
}
