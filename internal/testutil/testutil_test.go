package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestBuildRunsWorkload(t *testing.T) {
	for _, o := range []Options{{}, {NoFramePointers: true}} {
		bin := MustBuild(t, "churn", o)
		again := MustBuild(t, "churn", o)
		if bin != again {
			t.Errorf("built twice: %s, %s", bin, again)
		}
		out, err := exec.Command(bin, "1000", "1").Output()
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		if !strings.Contains(string(out), "ns_per_pair") {
			t.Errorf("unexpected output %q", out)
		}
	}
}

func TestBuildError(t *testing.T) {
	if _, err := Build("no-such-workload", Options{}); err == nil {
		t.Error("building a missing workload succeeded")
	}
	if _, err := os.Stat(dir); err != nil && dir != "" {
		t.Error(err)
	}
}
