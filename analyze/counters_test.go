package analyze

import (
	"reflect"
	"testing"
)

// leaves calls f with every uint64 inside v (fields, arrays of structs) and
// its path.
func leaves(v reflect.Value, path string, f func(reflect.Value, string)) {
	switch v.Kind() {
	case reflect.Uint64:
		f(v, path)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			leaves(v.Field(i), path+"."+v.Type().Field(i).Name, f)
		}
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			leaves(v.Index(i), path+"["+string(rune('0'+i))+"]", f)
		}
	default:
		panic("Counters holds a " + v.Kind().String() + " at " + path)
	}
}

// TestCountersAdd: Add sums every field, so that a counter added to
// Counters cannot be left out of the sums of sites, processes and the
// summary.
func TestCountersAdd(t *testing.T) {
	var a, b Counters
	n := 0
	leaves(reflect.ValueOf(&a).Elem(), "", func(v reflect.Value, _ string) { n++; v.SetUint(uint64(n)) })
	n = 0
	leaves(reflect.ValueOf(&b).Elem(), "", func(v reflect.Value, _ string) { n++; v.SetUint(uint64(100 * n)) })
	a.Add(&b)
	n = 0
	leaves(reflect.ValueOf(&a).Elem(), "", func(v reflect.Value, path string) {
		n++
		if got, want := v.Uint(), uint64(101*n); got != want {
			t.Errorf("%s: %d, want %d", path, got, want)
		}
	})
	if a.Calls() != a.Allocations+a.Reallocations {
		t.Errorf("calls %d", a.Calls())
	}
}
