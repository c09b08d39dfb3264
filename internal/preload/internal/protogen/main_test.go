package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestProtocolGoIsFresh checks that the committed protocol.go is what
// protogen writes from the committed protocol.h (as CI's go generate
// freshness check does, here in go test).
func TestProtocolGoIsFresh(t *testing.T) {
	src, err := os.ReadFile("../../csrc/protocol.h")
	if err != nil {
		t.Fatal(err)
	}
	want, err := generate("csrc/protocol.h", src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../protocol.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("protocol.go is not what protogen writes from csrc/protocol.h: run go generate ./internal/preload/")
	}
}

func TestGenerate(t *testing.T) {
	src := `#ifndef X
#define HS_MAGIC 0x31505348u /* "HSP1" */
#define HS_ENV_UID "HEAPSCOPE_PRELOAD_UID"
struct hs_x { int a; };
#define HS_RING_MAX (1u << 30)
#define HS_UNWIND_TABLES_FP 3u
#define HS_FUNC_NEW_ARRAY 12
#define HS_MAX_FUNC HS_FUNC_NEW_ARRAY /* the last */
#define HS_FAM_CXX 0x20u
#define HS_HEAP_JEMALLOC 3
#endif`
	got, err := generate("h", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"magic  = 0x31505348 // \"HSP1\"\n",
		"envUID = \"HEAPSCOPE_PRELOAD_UID\"\n\n",
		"ringMax        = (1 << 30)\n",
		"unwindTablesFP = 3\n",
		"maxFunc        = funcNewArray // the last\n",
		"_ = x[funcNewArray-event.FuncNewArray]\n",
		"_ = x[famCXX-event.FamilyCXX]\n",
		"_ = x[heapJemalloc-event.HeapJemalloc]\n",
		"import \"github.com/heapscope/heapscope/event\"",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestGenerateRejects(t *testing.T) {
	for _, src := range []string{
		"#define HS_A sizeof(int)",
		"#define HS_A HS_B",                // not defined before
		"#define HS_A",                     // no value
		"#define HS_A 1 /* open comment",   // comment not closed
		"#define HS_A 1.5",                 // not an integer
		"#define HS_A 'c'",                 // a character
		"/* nothing */\n#define OTHER 1\n", // no HS_ defines at all
		"#define HS_A \"esc\\\"aped\"",     // an escape protogen does not translate
	} {
		if _, err := generate("h", []byte(src)); !errors.Is(err, errSyntax) {
			t.Errorf("%q: %v, want errSyntax", src, err)
		}
	}
}
