package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// rustcPath finds rustc: on PATH, else rustup's; the test is skipped (or
// fails, in CI) without it.
func rustcPath(t *testing.T) string {
	t.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		home, _ := os.UserHomeDir()
		if rustc = filepath.Join(home, ".cargo", "bin", "rustc"); !fileExists(rustc) {
			testutil.SkipWithout(t, fmt.Errorf("rustc: %w", err))
		}
	}
	return rustc
}

// TestDemangleRustLegacy demangles legacy Rust names as rustc-demangle
// does: the underscores an ident starts with are kept
// (__rust_begin_short_backtrace came out with one), a "_" before a "$"
// escape goes, the escapes and ".." are decoded, the hash and clone
// suffixes dropped; C++ names still go to the C++ demangler.
func TestDemangleRustLegacy(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h1dcfae1ee62385c7E", "std::sys::backtrace::__rust_begin_short_backtrace"},
		{"_ZN3std10sys_common9backtrace28__rust_begin_short_backtrace17h0123456789abcdefE", "std::sys_common::backtrace::__rust_begin_short_backtrace"},
		{"_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0725285ee8904a4cE", "std::rt::lang_start::{{closure}}"},
		{"_ZN4core3ptr42drop_in_place$LT$std..io..error..Error$GT$17hbac2c2c583044a66E", "core::ptr::drop_in_place<std::io::error::Error>"},
		{"_ZN4core3ops8function6FnOnce40call_once$u7b$$u7b$vtable.shim$u7d$$u7d$17hbfb4ab8bc6355276E", "core::ops::function::FnOnce::call_once{{vtable.shim}}"},
		{"_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h7ab2b2bd1d1a2fbcE", "<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop"},
		{"_ZN3foo4__x_17h0123456789abcdefE.llvm.12345", "foo::__x_"},
		{"_ZN3foo3bar17h0123456789abcdefE", "foo::bar"},
		{"_ZN3foo3$q$17h0123456789abcdefE", "foo::$q$"}, // an escape it does not know: as it is
		{"_ZN3std2io5stdio6_print17h0123456789abcdefE", "std::io::stdio::_print"},
		{"_ZN3foo3barEv", "foo::bar()"},                                  // C++
		{"_ZN9__gnu_cxx3fooEi", "__gnu_cxx::foo(int)"},                   // C++, an ident starting with "__"
		{"_ZN99foo17h0123456789abcdefE", "_ZN99foo17h0123456789abcdefE"}, // a length past the end: not demangled
		{"malloc", "malloc"},
	} {
		if got := demangleName(c.in); got != c.want {
			t.Errorf("demangleName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRustLegacyNames demangles every legacy Rust name of a program rustc
// builds (std's generics instantiated in it are legacy-mangled) and checks
// __rust_begin_short_backtrace, which every Rust program's main runs
// through, and that no name is left mangled or loses an underscore.
func TestRustLegacyNames(t *testing.T) {
	rustc := rustcPath(t)
	src, err := filepath.Abs("testdata/rust_frames.rs")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "rust_frames")
	if out, err := exec.Command(rustc, "-g", "-O", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("rustc: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found, legacy := false, 0
	for _, s := range syms {
		if _, ok := rustLegacy(s.Name); !ok {
			continue
		}
		legacy++
		d := demangleName(s.Name)
		if isMangled(d) || strings.Contains(d, "$") {
			t.Errorf("%s demangled to %q", s.Name, d)
		}
		if strings.Contains(s.Name, "28__rust_begin_short_backtrace") {
			found = true
			if !strings.HasPrefix(d, "std::") || !strings.HasSuffix(d, "::__rust_begin_short_backtrace") {
				t.Errorf("%s demangled to %q, want std::...::__rust_begin_short_backtrace", s.Name, d)
			}
		}
	}
	if !found {
		t.Errorf("no __rust_begin_short_backtrace among the %d legacy names of %s", legacy, bin)
	}
}

// FuzzDemangle: a symbol name from a file is untrusted; demangling one
// never panics, and its result stays within the bound.
func FuzzDemangle(f *testing.F) {
	for _, s := range []string{"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h1dcfae1ee62385c7E",
		"_ZN3foo3$u7b$17h0123456789abcdefE", "_ZN1$17h0123456789abcdefE", "_ZN3foo3barEv", "_RNvNtCs1234_3std2rt10lang_start"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if out := demangleName(name); len(out) > 1<<maxDemangledShift+len(name) {
			t.Errorf("%q demangled to %d bytes", name, len(out))
		}
	})
}
