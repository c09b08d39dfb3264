package heapscope_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/heapscope/heapscope"
)

// Hooks see every allocation, reallocation and free of a session live. Here a program is launched
// under the preload provider (no privileges needed), with hooks installed
// before it starts, so that even the allocation in its constructor is seen.
func Example_hooks() {
	// A program that allocates 7,777 bytes in a constructor, then 10 ×
	// 4,321 bytes in main, each freed at once (the volatile sink keeps the
	// compiler from removing the pairs). Any dynamically linked program
	// will do; this one is compiled here so that the output is known.
	dir, err := os.MkdirTemp("", "heapscope-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	program := filepath.Join(dir, "allocs")
	cc := exec.Command("cc", "-O1", "-x", "c", "-o", program, "-")
	cc.Stdin = strings.NewReader(`#include <stdlib.h>
void *volatile sink;
__attribute__((constructor)) static void early(void) { sink = malloc(7777); free(sink); }
int main(void) {
	for (int i = 0; i < 10; i++) { sink = malloc(4321); free(sink); }
	return 0;
}
`)
	if out, err := cc.CombinedOutput(); err != nil {
		fmt.Printf("cc: %v: %s\n", err, out)
		return
	}
	var ctor, blocks, frees atomic.Int64
	props := heapscope.Properties{
		FileMode: heapscope.RealTime, // no file: events reach only the hooks
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
	s, err := heapscope.Launch("example-hooks", props, exec.Command(program))
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Wait() // the session ends with the program
	status, _ := s.ExitStatus()
	fmt.Printf("constructor: %d, main: %d blocks of 4321 bytes, exit status %d\n", ctor.Load(), blocks.Load(), status)
	fmt.Println("matched frees ≥ 10:", frees.Load() >= 10)
	// Output:
	// constructor: 1, main: 10 blocks of 4321 bytes, exit status 0
	// matched frees ≥ 10: true
}
