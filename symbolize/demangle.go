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
	// The length bound keeps a hostile name from costing unbounded memory.
	// Without clone suffixes ([clone .isra.0]), as addr2line prints them:
	// a clone is the function it was cloned from.
	s, err := demangle.ToString(name, demangle.NoClones, demangle.MaxLength(16))
	if err != nil {
		return name
	}
	return s
}

// isMangled reports whether name looks like a C++ or Rust mangled name.
func isMangled(name string) bool {
	return strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R")
}
