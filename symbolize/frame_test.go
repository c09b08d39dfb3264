package symbolize

import "testing"

func TestFrameName(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want string
	}{
		{Frame{Function: "sqlite3Malloc", Module: "/usr/lib/libsqlite3.so.0", Offset: 0x10}, "sqlite3Malloc"},
		{Frame{Module: "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0", Offset: 0xa7504, Address: 0x7f00000a7504}, "libsqlite3.so.0+0xa7504"},
		{Frame{Address: 0x7f3a4c201136}, "0x7f3a4c201136"},
	} {
		if got := c.f.Name(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
}

// TestKeys: which frames are the same within a trace (Key) and across
// traces (DiffKey).
func TestKeys(t *testing.T) {
	grow := Frame{Function: "grow", File: "/src/a.c", Line: 14, Module: "/build/a", Offset: 0x132e, Address: 0x55550000132e}
	for _, c := range []struct {
		name       string
		a, b       Frame
		same, diff bool // same Key, same DiffKey
	}{
		{"another process", grow, with(grow, func(f *Frame) { f.Address = 0x56660000132e }), true, true},
		{"another build's path", grow, with(grow, func(f *Frame) { f.Module, f.Offset = "/other/a", 0x1400 }), false, true},
		{"inlined", grow, with(grow, func(f *Frame) { f.Inlined = true }), false, false},
		{"another line", grow, with(grow, func(f *Frame) { f.Line = 15 }), false, false},
		{"unsymbolized, same offset", Frame{Module: "/usr/lib/libx.so", Offset: 0x10, Address: 0x7000010},
			Frame{Module: "/usr/lib/libx.so", Offset: 0x10, Address: 0x8000010}, true, true},
		{"unsymbolized, same base name", Frame{Module: "/usr/lib/libx.so", Offset: 0x10},
			Frame{Module: "/opt/lib/libx.so", Offset: 0x10}, false, true},
		{"unsymbolized, another offset", Frame{Module: "/usr/lib/libx.so", Offset: 0x10},
			Frame{Module: "/usr/lib/libx.so", Offset: 0x20}, false, false},
		{"no module", Frame{Address: 0x1000}, Frame{Address: 0x2000}, false, false},
	} {
		if got := c.a.Key() == c.b.Key(); got != c.same {
			t.Errorf("%s: same Key %v, want %v", c.name, got, c.same)
		}
		if got := c.a.DiffKey() == c.b.DiffKey(); got != c.diff {
			t.Errorf("%s: same DiffKey %v, want %v", c.name, got, c.diff)
		}
		sa, sb := []Frame{c.a, grow}, []Frame{c.b, grow}
		if got := SiteKey(sa) == SiteKey(sb); got != c.same {
			t.Errorf("%s: same SiteKey %v, want %v", c.name, got, c.same)
		}
		if got := DiffSiteKey(sa) == DiffSiteKey(sb); got != c.diff {
			t.Errorf("%s: same DiffSiteKey %v, want %v", c.name, got, c.diff)
		}
	}
	if SiteKey([]Frame{grow}) == SiteKey([]Frame{grow, grow}) {
		t.Error("stacks of one and two frames have one key")
	}
}

func with(f Frame, change func(*Frame)) Frame {
	change(&f)
	return f
}

// TestSiteName: a site is named by its first frame that is not an
// allocator wrapper, the wrapper's internals of its module skipped with
// it, module+offset when unsymbolized.
func TestSiteName(t *testing.T) {
	const cc1, sqlite, py = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6", "/usr/bin/python3.11"
	for _, c := range []struct {
		name   string
		frames []Frame
		want   string
	}{
		{"plain", []Frame{{Function: "make_node", Module: "/a"}, {Function: "main", Module: "/a"}}, "make_node"},
		{"xmalloc", []Frame{{Function: "xmalloc", Module: cc1}, {Function: "ggc_alloc", Module: cc1}}, "ggc_alloc"},
		{"unsymbolized helper of a wrapper", []Frame{{Module: sqlite, Offset: 0xa7504}, {Function: "sqlite3Malloc", Module: sqlite},
			{Module: sqlite, Offset: 0xb786c}, {Function: "sqlite3BtreeInsert", Module: sqlite}}, "libsqlite3.so.0.8.6+0xb786c"},
		{"unsymbolized, no wrapper", []Frame{{Module: sqlite, Offset: 0xa7504}, {Module: sqlite, Offset: 0xb786c}}, "libsqlite3.so.0.8.6+0xa7504"},
		{"another module's frame is no helper", []Frame{{Function: "helper", Module: "/usr/bin/app"}, {Function: "sqlite3Malloc", Module: sqlite},
			{Function: "caller", Module: "/usr/bin/app"}}, "helper"},
		{"cpython", []Frame{{Function: "_PyObject_Malloc", Module: py}, {Function: "PyObject_Malloc", Module: py},
			{Function: "list_resize", Module: py}}, "list_resize"},
		{"only wrappers", []Frame{{Function: "xmalloc", Module: cc1}, {Function: "xcalloc", Module: cc1}}, "xmalloc"},
		{"no stack", nil, NoStack},
	} {
		if got := SiteName(c.frames); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
