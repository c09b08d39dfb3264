package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time with -ldflags "-X main.version=…"; otherwise
// it comes from the module's build information.
var version = ""

func init() {
	register(&command{
		name:    "version",
		summary: "print heapscope's version",
		setup: func(fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("takes no arguments")
				}
				fmt.Printf("heapscope %s %s/%s %s\n", buildVersion(), runtime.GOOS, runtime.GOARCH, runtime.Version())
				return nil
			}
		},
	})
}

func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
