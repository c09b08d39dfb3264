package benchutil

import (
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestMachine(t *testing.T) {
	m := Machine()
	if !strings.Contains(m, "CPUs, kernel ") || !strings.Contains(m, "go1.") {
		t.Errorf("Machine() = %q, lacks the CPU count, kernel or Go version", m)
	}
}
