package symbolize

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// demangleName demangles a C++ (Itanium ABI) or Rust (legacy or v0) symbol
// name, and returns other names, and names it cannot demangle, as they are.
func demangleName(name string) (out string) {
	if !isMangled(name) {
		return name // C, and most of any C library: skip the parser
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	if s, ok := rustLegacy(name); ok {
		return s
	}
	// The length bound keeps a hostile name from costing unbounded memory.
	// Without clone suffixes ([clone .isra.0]), as addr2line prints them:
	// a clone is the function it was cloned from.
	s, err := demangle.ToString(name, demangle.NoClones, demangle.MaxLength(maxDemangledShift))
	if err != nil {
		return name
	}
	return s
}

// maxDemangledShift bounds a demangled name to 2^16 bytes.
const maxDemangledShift = 16

// isMangled reports whether name looks like a C++ or Rust mangled name.
func isMangled(name string) bool {
	return strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R")
}

// rustLegacy demangles a Rust name of the legacy mangling,
// _ZN{len}{ident}...17h{16 hex digits}E with an optional .suffix, as
// rustc-demangle does (without the hash): the idents joined by "::", a "_"
// before a "$" escape dropped, the escapes ($LT$, $u7b$, "..", ...)
// decoded. The demangle package treats an underscore after the length as
// a separator and drops it, which turned __rust_begin_short_backtrace into
// _rust_begin_short_backtrace. False for anything else (C++ names go to the
// demangle package).
func rustLegacy(name string) (string, bool) {
	s, ok := strings.CutPrefix(name, "_ZN")
	if !ok {
		return "", false
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i] // .llvm.NNN and other clone suffixes: the function itself
	}
	s, ok = strings.CutSuffix(s, "E")
	if !ok || len(s) < 19 || !isRustHash(s[len(s)-19:]) {
		return "", false
	}
	s = s[:len(s)-19]
	var b strings.Builder
	for s != "" {
		n := 0
		for len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
			n = n*10 + int(s[0]-'0')
			s = s[1:]
			if n > len(s) {
				return "", false
			}
		}
		if n == 0 {
			return "", false
		}
		if b.Len() > 0 {
			b.WriteString("::")
		}
		rustIdent(&b, s[:n])
		s = s[n:]
		if b.Len() > 1<<maxDemangledShift {
			return "", false
		}
	}
	return b.String(), b.Len() > 0
}

// isRustHash reports whether s is "17h" and 16 hex digits: the hash a
// legacy Rust name ends with.
func isRustHash(s string) bool {
	if !strings.HasPrefix(s, "17h") {
		return false
	}
	for _, c := range s[3:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

var rustEscapes = map[string]string{"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ","}

// rustIdent writes one ident of a legacy Rust name, its escapes decoded; an
// escape it does not know ends the decoding, and the rest is written as
// it is (as rustc-demangle does).
func rustIdent(b *strings.Builder, id string) {
	if strings.HasPrefix(id, "_$") {
		id = id[1:]
	}
	for id != "" {
		switch {
		case id[0] == '$':
			end := strings.IndexByte(id[1:], '$')
			if end < 0 {
				b.WriteString(id)
				return
			}
			code := id[1 : 1+end]
			if r, ok := rustEscapes[code]; ok {
				b.WriteString(r)
			} else if r, ok := rustChar(code); ok {
				b.WriteRune(r)
			} else {
				b.WriteString(id)
				return
			}
			id = id[end+2:]
		case strings.HasPrefix(id, ".."):
			b.WriteString("::")
			id = id[2:]
		default:
			b.WriteByte(id[0])
			id = id[1:]
		}
	}
}

// rustChar decodes the code of a $u..$ escape: u and the hex digits of a
// printable character.
func rustChar(code string) (rune, bool) {
	hex, ok := strings.CutPrefix(code, "u")
	if !ok || hex == "" || len(hex) > 6 {
		return 0, false
	}
	var r rune
	for _, c := range hex {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	if r < ' ' || r > 0x10ffff || (r >= 0xd800 && r < 0xe000) {
		return 0, false
	}
	return r, true
}
