package usdt

import (
	"debug/elf"
	"encoding/binary"
	"testing"
)

var leOrder = binary.LittleEndian

// FuzzParseNotes feeds note sections of any bytes to the parser: it must
// return probes or an error, never panic, and each probe it returns has a
// provider and a name.
func FuzzParseNotes(f *testing.F) {
	f.Add(note(0x1000, 0x2000, 0x3000, "otel_memory", "alloc", "8@%rdi 8@%rsi 8@%rdx"))
	f.Add(append(note(1, 2, 0, "p", "n", ""), note(3, 4, 5, "q", "m", "-4@[sp, 8]")...))
	if ef, err := elf.Open("/usr/bin/python3.11"); err == nil {
		if s := ef.Section(".note.stapsdt"); s != nil {
			if b, err := s.Data(); err == nil {
				f.Add(b)
			}
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, class := range []elf.Class{elf.ELFCLASS32, elf.ELFCLASS64} {
			ps, err := ParseNotes(data, leOrder, class)
			if err != nil {
				continue
			}
			for _, p := range ps {
				if p.Provider == "" || p.Name == "" {
					t.Fatalf("probe without a provider or name: %+v", p)
				}
				if (p.ArgsErr == nil) != (p.Args != nil || p.ArgsSpec == "" || onlySpaces(p.ArgsSpec)) {
					t.Fatalf("args %q: %+v, %v", p.ArgsSpec, p.Args, p.ArgsErr)
				}
			}
		}
	})
}

func onlySpaces(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			return false
		}
	}
	return true
}

// FuzzParseArgs: any spec parses or fails, never panics; a parsed argument
// has a known kind and a valid size and scale.
func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"8@%rdi -4@%esi", "-4@112(%rsp)", "8@16(%rax,%rbx,8)", "4@counter+8(%rip)",
		"8@$0x10", "8@x0 -4@[sp, 16]", "2@counter", "8@[x1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := ParseArgs(s)
		if err != nil {
			return
		}
		for _, a := range args {
			if a.Kind < ArgRegister || a.Kind > ArgConstant {
				t.Fatalf("%q: kind %v", s, a.Kind)
			}
			switch a.Size {
			case 0, 1, 2, 4, 8:
			default:
				t.Fatalf("%q: size %d", s, a.Size)
			}
			switch a.Scale {
			case 1, 2, 4, 8:
			default:
				t.Fatalf("%q: scale %d", s, a.Scale)
			}
		}
	})
}
