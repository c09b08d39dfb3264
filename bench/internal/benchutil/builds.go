package benchutil

import (
	"os"
	"path/filepath"
	"strings"
)

// A Build is a heapscope binary a bench compares, with its label.
type Build struct{ Label, Path string }

// Builds parses a -heapscope flag's list, "label=path,…" (a bare path is
// labelled by its base name). An empty list is heapscope built from this
// tree into dir, labelled "this tree".
func Builds(list, dir string) ([]Build, error) {
	var out []Build
	for _, b := range strings.Split(list, ",") {
		if b == "" {
			continue
		}
		label, path, ok := strings.Cut(b, "=")
		if !ok {
			label, path = filepath.Base(b), b
		}
		out = append(out, Build{label, path})
	}
	if len(out) == 0 {
		bin := filepath.Join(dir, "heapscope")
		if err := BuildHeapscope(bin); err != nil {
			return nil, err
		}
		out = []Build{{"this tree", bin}}
	}
	return out, nil
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes, as
// /proc/loadavg gives it ("?" where it cannot be read): benches state it
// beside their figures.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
