package analyze

import (
	"reflect"
	"testing"
)

// TestCountersAdd: Add sums every field, so that a counter added to
// Counters cannot be left out of the sums of sites, processes and the
// summary.
func TestCountersAdd(t *testing.T) {
	var a, b Counters
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := 0; i < va.NumField(); i++ {
		va.Field(i).SetUint(uint64(i + 1))
		vb.Field(i).SetUint(uint64(100 * (i + 1)))
	}
	a.Add(&b)
	for i := 0; i < va.NumField(); i++ {
		if got, want := va.Field(i).Uint(), uint64(101*(i+1)); got != want {
			t.Errorf("%s: %d, want %d", va.Type().Field(i).Name, got, want)
		}
	}
	if a.Calls() != a.Allocations+a.Reallocations {
		t.Errorf("calls %d", a.Calls())
	}
}
