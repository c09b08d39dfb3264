package event

import "testing"

func TestParseFamily(t *testing.T) {
	f, err := ParseFamily("malloc,free,cxx")
	if err != nil {
		t.Fatal(err)
	}
	if f != FamilyMalloc|FamilyFree|FamilyCXX {
		t.Errorf("got %v", f)
	}
	if f.String() != "malloc,free,cxx" {
		t.Errorf("String() = %q", f.String())
	}
	if f, _ := ParseFamily("heap"); f != FamilyHeap {
		t.Errorf("heap = %v", f)
	}
	if _, err := ParseFamily("malloc,bogus"); err == nil {
		t.Error("bogus family accepted")
	}
}

func TestFuncFamily(t *testing.T) {
	for f := FuncMalloc; f < numFuncs; f++ {
		if f.Family() == 0 {
			t.Errorf("%v has no family", f)
		}
	}
}

func TestKindSet(t *testing.T) {
	s := KindsOf(KindAlloc, KindRealloc)
	if !s.Has(KindAlloc) || !s.Has(KindRealloc) || s.Has(KindFree) {
		t.Errorf("set %v", s)
	}
	if s.String() != "alloc,realloc" {
		t.Errorf("String() = %q", s.String())
	}
	for k := KindAlloc; k < numKinds; k++ {
		p, err := ParseKind(k.String())
		if err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, p, err)
		}
	}
}

type countSink struct {
	Sink
	events int
}

func (c *countSink) Events(ev []Event) error { c.events += len(ev); return nil }

func TestTee(t *testing.T) {
	a, b := &countSink{Sink: Discard}, &countSink{Sink: Discard}
	s := Tee(a, b)
	if err := s.Events(make([]Event, 3)); err != nil {
		t.Fatal(err)
	}
	if a.events != 3 || b.events != 3 {
		t.Errorf("a=%d b=%d", a.events, b.events)
	}
}
