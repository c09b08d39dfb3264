package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// siteStacks records `run` of bin with args and the given provider
// arguments, and returns each allocation site's stack (its function names,
// outermost last) after its bytes, sorted.
func siteStacks(t *testing.T, provider []string, bin string, args ...string) []string {
	t.Helper()
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.hst")
	runArgs := append(append([]string{"run", "-q"}, provider...), "-o", trace, "--", bin)
	if code, errs := exitCode(t, cli(t, append(runArgs, args...)...)); code != 0 {
		t.Fatalf("%v: exit %d: %s", runArgs, code, errs)
	}
	r := reportJSON(t, trace)
	var sites []string
	for _, s := range r.Allocations {
		var fns []string
		for _, f := range s.Stack {
			fns = append(fns, f.Function)
		}
		sites = append(sites, fmt.Sprintf("%d: %s", s.Bytes, strings.Join(fns, " ")))
	}
	sort.Strings(sites)
	return sites
}

// TestProvidersDefaultStacks launches ebpf_dlopen with each provider's
// default unwinding: the eBPF provider's tables of libc (mapped after the
// launch's attach) and of a library without frame pointers that main
// dlopens are loaded before their code runs, so every site's stack, from
// its first (and only) allocation, is the interposer's, frame by frame, to
// _start. Before, the eBPF stacks stopped at __libc_start_call_main and
// lost the library's frames (walked by frame pointer).
func TestProvidersDefaultStacks(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	lib := testutil.MustBuild(t, "ebpf_dlopenlib", testutil.Options{NoFramePointers: true,
		Flags: []string{"-shared", "-fPIC", "-fno-optimize-sibling-calls"}})
	bin := testutil.MustBuild(t, "ebpf_dlopen", testutil.Options{Flags: []string{"-ldl"}})
	pre := siteStacks(t, nil, bin, lib)
	bpf := siteStacks(t, []string{"--provider", "ebpf"}, bin, lib)

	// The workload's own sites, as the interposer sees them: what makes
	// the comparison mean something.
	for _, want := range []string{
		"1111: main_site main_mid main __libc_start_call_main __libc_start_main_impl _start",
		"3333: lib_site lib_mid lib_work main __libc_start_call_main __libc_start_main_impl _start",
		"2222: lib_site lib_mid lib_ctor call_init ",
	} {
		found := false
		for _, s := range pre {
			found = found || strings.HasPrefix(s, want) && strings.HasSuffix(s, " main __libc_start_call_main __libc_start_main_impl _start")
		}
		if !found {
			t.Errorf("preload: no site %q... to _start in\n%s", want, strings.Join(pre, "\n"))
		}
	}
	if !slices.Equal(bpf, pre) {
		t.Errorf("sites and stacks:\nebpf:\n%s\npreload:\n%s", strings.Join(bpf, "\n"), strings.Join(pre, "\n"))
	}
}
