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

// buildVersion is the link-time version, else the module's version when
// heapscope was built as a dependency (go install …@v1.2.3), else the VCS
// revision the binary was built from (with "+dirty" when the work tree had
// changes): never Go's placeholder "(devel)".
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (built without module information)"
	}
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, when string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown (built without version control information; build with 'go build' in a git checkout, or -ldflags -X main.version=V)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := "rev " + rev
	if dirty {
		v += "+dirty"
	}
	if when != "" {
		v += " (" + when + ")"
	}
	return v
}
