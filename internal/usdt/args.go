package usdt

import (
	"fmt"
	"strconv"
	"strings"
)

// ArgKind is where an argument's value is.
type ArgKind uint8

// The kinds of argument.
const (
	ArgRegister ArgKind = iota + 1 // in register Reg
	ArgMemory                      // at Offset (+ Symbol) from Reg (+ Index*Scale); Reg "" is absolute
	ArgConstant                    // the constant Value
)

func (k ArgKind) String() string {
	switch k {
	case ArgRegister:
		return "register"
	case ArgMemory:
		return "memory"
	case ArgConstant:
		return "constant"
	}
	return fmt.Sprintf("ArgKind(%d)", uint8(k))
}

// Arg is one argument of a probe, as its spec says: "[-]SIZE@OPERAND",
// where a negative size is a signed value and the operand is an assembler
// operand (x86-64 AT&T: %rdi, $5, -8(%rbp), 16(%rax,%rbx,8), sym(%rip);
// arm64: x0, [sp, 16], [x1]).
type Arg struct {
	Spec   string // this argument's spec, as written
	Size   int    // bytes: 1, 2, 4 or 8; 0 when the spec gives none
	Signed bool
	Kind   ArgKind
	// Reg is the register (ArgRegister) or the base register (ArgMemory),
	// without the % prefix ("rdi", "edi", "x0"); Index and Scale an
	// x86-64 index register and its scale (1 when none).
	Reg, Index string
	Scale      int
	// Offset is a memory operand's displacement, Symbol its symbolic part
	// ("counter" in "counter+8(%rip)", relative to the symbol's address).
	Offset int64
	Symbol string
	// Value is a constant's value.
	Value int64
}

// maxArgs bounds the arguments of one probe (sdt.h allows 12).
const maxArgs = 12

// ParseArgs parses a probe's argument specs, separated by spaces.
func ParseArgs(s string) ([]Arg, error) {
	specs, err := splitArgs(s)
	if err != nil {
		return nil, err
	}
	if len(specs) > maxArgs {
		return nil, fmt.Errorf("usdt: %d arguments (at most %d)", len(specs), maxArgs)
	}
	var args []Arg
	for _, sp := range specs {
		a, err := parseArg(sp)
		if err != nil {
			return nil, fmt.Errorf("usdt: argument %q: %w", sp, err)
		}
		args = append(args, a)
	}
	return args, nil
}

// splitArgs splits on spaces outside brackets (arm64's "[sp, 16]").
func splitArgs(s string) ([]string, error) {
	var out []string
	depth, start := 0, -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '[':
			depth++
		case c == ']':
			if depth == 0 {
				return nil, fmt.Errorf("usdt: unbalanced ']' in %q", s)
			}
			depth--
		case c == ' ' && depth == 0:
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("usdt: unbalanced '[' in %q", s)
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out, nil
}

func parseArg(spec string) (Arg, error) {
	a := Arg{Spec: spec, Scale: 1}
	op := spec
	if at := strings.IndexByte(spec, '@'); at >= 0 {
		sz := spec[:at]
		if strings.HasPrefix(sz, "-") {
			a.Signed = true
			sz = sz[1:]
		}
		switch sz {
		case "1", "2", "4", "8":
			a.Size = int(sz[0] - '0')
		default:
			return a, fmt.Errorf("size %q is not 1, 2, 4 or 8", spec[:at])
		}
		op = spec[at+1:]
	}
	if op == "" {
		return a, fmt.Errorf("no operand")
	}
	switch {
	case op[0] == '%': // x86 register
		a.Kind, a.Reg = ArgRegister, op[1:]
		if !isRegName(a.Reg) {
			return a, fmt.Errorf("bad register %q", op)
		}
	case op[0] == '$': // x86 immediate
		v, err := parseInt(op[1:])
		if err != nil {
			return a, err
		}
		a.Kind, a.Value = ArgConstant, v
	case op[0] == '[': // arm64 memory: [reg] or [reg, #?imm]
		return parseARMMemory(a, op)
	case isARMReg(op): // arm64 register
		a.Kind, a.Reg = ArgRegister, op
	default:
		return parseX86Memory(a, op)
	}
	return a, nil
}

// parseX86Memory parses DISP(%BASE[,%INDEX[,SCALE]]), where DISP is a
// number, a symbol, SYMBOL+N or SYMBOL-N, or absent; or an absolute DISP.
func parseX86Memory(a Arg, op string) (Arg, error) {
	a.Kind = ArgMemory
	disp := op
	if p := strings.IndexByte(op, '('); p >= 0 {
		if !strings.HasSuffix(op, ")") {
			return a, fmt.Errorf("bad memory operand %q", op)
		}
		disp = op[:p]
		parts := strings.Split(op[p+1:len(op)-1], ",")
		if len(parts) > 3 {
			return a, fmt.Errorf("bad memory operand %q", op)
		}
		for i, r := range parts[:min(len(parts), 2)] {
			if r == "" && i == 0 {
				continue
			}
			if !strings.HasPrefix(r, "%") || !isRegName(r[1:]) {
				return a, fmt.Errorf("bad register %q in %q", r, op)
			}
			if i == 0 {
				a.Reg = r[1:]
			} else {
				a.Index = r[1:]
			}
		}
		if len(parts) == 3 {
			switch parts[2] {
			case "1", "2", "4", "8":
				a.Scale = int(parts[2][0] - '0')
			default:
				return a, fmt.Errorf("bad scale %q in %q", parts[2], op)
			}
		}
	}
	if disp == "" {
		return a, nil
	}
	if isNumber(disp) {
		v, err := parseInt(disp)
		a.Offset = v
		return a, err
	}
	sym, num := disp, ""
	if i := strings.IndexAny(disp, "+-"); i > 0 {
		sym, num = disp[:i], disp[i:]
	}
	if !isSymbol(sym) {
		return a, fmt.Errorf("bad displacement %q", disp)
	}
	a.Symbol = sym
	if num != "" {
		v, err := parseInt(num)
		if err != nil {
			return a, err
		}
		a.Offset = v
	}
	return a, nil
}

// parseARMMemory parses [REG] and [REG, IMM] (IMM optionally #-prefixed).
func parseARMMemory(a Arg, op string) (Arg, error) {
	a.Kind = ArgMemory
	if !strings.HasSuffix(op, "]") {
		return a, fmt.Errorf("bad memory operand %q", op)
	}
	parts := strings.Split(op[1:len(op)-1], ",")
	if len(parts) > 2 {
		return a, fmt.Errorf("bad memory operand %q", op)
	}
	a.Reg = strings.TrimSpace(parts[0])
	if !isARMReg(a.Reg) {
		return a, fmt.Errorf("bad register %q in %q", a.Reg, op)
	}
	if len(parts) == 2 {
		v, err := parseInt(strings.TrimPrefix(strings.TrimSpace(parts[1]), "#"))
		if err != nil {
			return a, err
		}
		a.Offset = v
	}
	return a, nil
}

func parseInt(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		// A 64-bit constant written unsigned (0xffffffffffffffff).
		u, uerr := strconv.ParseUint(s, 0, 64)
		if uerr != nil {
			return 0, fmt.Errorf("bad number %q", s)
		}
		v = int64(u)
	}
	return v, nil
}

func isNumber(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return s != "" && s[0] >= '0' && s[0] <= '9'
}

func isRegName(s string) bool {
	if s == "" || len(s) > 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return s[0] >= 'a' && s[0] <= 'z'
}

func isSymbol(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '.' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// isARMReg reports whether s names an arm64 general register.
func isARMReg(s string) bool {
	switch s {
	case "sp", "wsp", "xzr", "wzr", "lr", "fp":
		return true
	}
	if len(s) < 2 || len(s) > 3 || s[0] != 'x' && s[0] != 'w' {
		return false
	}
	n, err := strconv.Atoi(s[1:])
	return err == nil && n >= 0 && n <= 30 && s[1] != '+' && (len(s) == 2 || s[1] != '0')
}

// x86-64's struct pt_regs, in order: the kernel's names for its fields
// (as tracefs fetch arguments name them), each 8 bytes.
var ptRegs = []string{"r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8",
	"ax", "cx", "dx", "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss"}

// x86Regs maps each name of an x86-64 general register, of any width
// (rax, eax, ax, al, ah; r8, r8d, r8w, r8b), to its pt_regs field.
var x86Regs = func() map[string]string {
	m := map[string]string{"rip": "ip", "eip": "ip"}
	for _, r := range []string{"a", "b", "c", "d"} {
		m["r"+r+"x"], m["e"+r+"x"], m[r+"x"], m[r+"l"], m[r+"h"] = r+"x", r+"x", r+"x", r+"x", r+"x"
	}
	for _, r := range []string{"si", "di", "bp", "sp"} {
		m["r"+r], m["e"+r], m[r], m[r+"l"] = r, r, r, r
	}
	for i := 8; i <= 15; i++ {
		n := "r" + strconv.Itoa(i)
		m[n], m[n+"d"], m[n+"w"], m[n+"b"] = n, n, n, n
	}
	return m
}()

// PtRegsX86 returns the x86-64 struct pt_regs field that holds register
// reg (as an Arg names it: "rdi", "esi", "r12", "rip") and its byte
// offset in the struct: where a uprobe's BPF program, or a tracefs fetch
// argument (%NAME), reads it. ok is false for a name that is not an x86-64
// general register. A narrower register is the low bytes of its field
// (ah, bh, ch, dh are the second byte: the caller shifts).
func PtRegsX86(reg string) (field string, offset int, ok bool) {
	field, ok = x86Regs[reg]
	if !ok {
		return "", 0, false
	}
	for i, f := range ptRegs {
		if f == field {
			return field, 8 * i, true
		}
	}
	return "", 0, false
}
