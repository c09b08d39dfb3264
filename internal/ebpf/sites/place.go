package sites

import (
	"bytes"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Placement says where in a function its probe goes.
//
// A uprobe replaces an instruction with a breakpoint. When the kernel can
// emulate the displaced instruction (a push of a register, a relative jump,
// call or conditional jump, a nop), the probe costs one trap; otherwise the
// instruction is single-stepped out of line, which in a VM costs tens of
// microseconds. glibc's free starts with `test %rdi,%rdi`, which is not
// emulated, so its probe goes a few instructions in.
type Placement struct {
	// Offset is where the probe goes, in bytes from the function's start.
	Offset uint64
	// Emulated reports whether the kernel emulates the probed instruction.
	// When it is false the probe is on the first instruction and is
	// single-stepped: correct, but slow.
	Emulated bool
	// SPDelta is how many bytes the function pushed before Offset: the
	// return address is at the stack pointer plus SPDelta. It is always 0
	// for roles with a return probe.
	SPDelta uint64
	// Insn is the probed instruction, in GNU syntax.
	Insn string
	// Reason says why no emulated instruction could be used, when
	// Emulated is false.
	Reason string
}

func (p Placement) String() string {
	if !p.Emulated {
		return fmt.Sprintf("+%d %s (single-stepped: %s)", p.Offset, p.Insn, p.Reason)
	}
	return fmt.Sprintf("+%d %s", p.Offset, p.Insn)
}

// maxScan bounds how far into a function a probe may move. The allocator
// functions reach an emulated instruction within a few.
const maxScan = 24

var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// Place finds where to probe the function whose machine code is code, for a
// probe of role r: the first instruction the kernel emulates that every call
// reaches with the function's arguments, stack pointer and frame pointer
// still as they were at entry (or with the stack pointer moved by a known
// amount, for roles without a return probe). For RoleFree and RoleWrapFree a
// leading NULL test of the pointer is stepped over, so that free(NULL)
// does not trap at all.
//
// When no such instruction exists, the probe stays at the entry and is
// single-stepped. Place never fails; code that cannot be decoded gives an
// entry placement with the reason.
func Place(code []byte, r Role) Placement {
	entry := func(reason string) Placement {
		p := Placement{Reason: reason}
		if in, err := decode(code); err == nil {
			p.Insn = syntax(in, code)
			p.Emulated = emulated(code[:in.Len])
			if p.Emulated {
				p.Reason = ""
			}
		}
		return p
	}

	var (
		off     int
		sp      uint64
		prevTst x86asm.Reg // register of a just-seen `test reg,reg`
	)
	argRegs := r.argRegs()
	for n := 0; n < maxScan; n++ {
		if off >= len(code) {
			return entry("the function ends before an emulated instruction")
		}
		rest := code[off:]
		if bytes.HasPrefix(rest, endbr64) {
			off += len(endbr64)
			prevTst = 0
			continue
		}
		in, err := decode(rest)
		if err != nil {
			return entry(fmt.Sprintf("cannot decode at +%d: %v", off, err))
		}
		raw := rest[:in.Len]

		if isNullExit(in, prevTst, r) {
			// test %rdi,%rdi; je out: only NULL takes the branch.
			off += in.Len
			prevTst = 0
			continue
		}
		if emulated(raw) {
			if sp != 0 && r.hasReturn() {
				return entry("the stack pointer moves before the first emulated instruction")
			}
			p := Placement{Offset: uint64(off), Emulated: true, SPDelta: sp, Insn: syntax(in, raw)}
			if reason := jumpsInto(code, off); reason != "" {
				return entry(reason)
			}
			return p
		}
		prevTst = 0
		if in.Op == x86asm.TEST && in.Args[0] == in.Args[1] {
			if reg, ok := in.Args[0].(x86asm.Reg); ok {
				prevTst = reg
			}
		}
		if delta, ok := spAdjust(in); ok {
			sp += delta
			off += in.Len
			continue
		}
		if reason := unsafeToSkip(in, argRegs); reason != "" {
			return entry(fmt.Sprintf("%s at +%d", reason, off))
		}
		off += in.Len
	}
	return entry("no emulated instruction near the entry")
}

func decode(code []byte) (x86asm.Inst, error) {
	in, err := x86asm.Decode(code, 64)
	if err != nil {
		return in, err
	}
	if in.Len <= 0 || in.Len > len(code) {
		return in, fmt.Errorf("bad instruction length %d", in.Len)
	}
	return in, nil
}

func syntax(in x86asm.Inst, raw []byte) string {
	if bytes.HasPrefix(raw, endbr64) {
		return "endbr64"
	}
	return x86asm.GNUSyntax(in, 0, nil)
}

// The nops the kernel emulates (arch/x86's x86_nops), by length.
var kernelNops = [][]byte{
	1: {0x90},
	2: {0x66, 0x90},
	3: {0x0f, 0x1f, 0x00},
	4: {0x0f, 0x1f, 0x40, 0x00},
	5: {0x0f, 0x1f, 0x44, 0x00, 0x00},
	6: {0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00},
	7: {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00},
	8: {0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
}

// emulated reports whether the x86-64 kernel emulates the instruction raw
// when a uprobe is on it, as arch/x86/kernel/uprobes.c decides: the standard
// nops, relative jmp, call and jcc without an operand-size prefix, and push
// of a register (rex.B allowed).
func emulated(raw []byte) bool {
	if len(raw) < len(kernelNops) && bytes.Equal(raw, kernelNops[len(raw)]) {
		return true
	}
	switch {
	case len(raw) == 1 && raw[0] >= 0x50 && raw[0] <= 0x57: // push %reg
		return true
	case len(raw) == 2 && raw[0] == 0x41 && raw[1] >= 0x50 && raw[1] <= 0x57: // push %r8..%r15
		return true
	case len(raw) == 2 && (raw[0] == 0xeb || raw[0]&0xf0 == 0x70): // jmp/jcc rel8
		return true
	case len(raw) == 5 && (raw[0] == 0xe9 || raw[0] == 0xe8): // jmp/call rel32
		return true
	case len(raw) == 6 && raw[0] == 0x0f && raw[1]&0xf0 == 0x80: // jcc rel32
		return true
	}
	return false
}

// isNullExit reports whether in is the branch of a NULL check of the pointer
// argument of a free-like function, taken only when the pointer is NULL.
func isNullExit(in x86asm.Inst, tested x86asm.Reg, r Role) bool {
	if r != RoleFree && r != RoleWrapFree {
		return false
	}
	return in.Op == x86asm.JE && tested == x86asm.RDI
}

// spAdjust reports how much in moves the stack pointer down, for the
// instructions a prologue uses.
func spAdjust(in x86asm.Inst) (uint64, bool) {
	switch in.Op {
	case x86asm.PUSH:
		if _, ok := in.Args[0].(x86asm.Reg); ok {
			return 8, true
		}
	case x86asm.SUB:
		if in.Args[0] == x86asm.RSP {
			if imm, ok := in.Args[1].(x86asm.Imm); ok && imm > 0 && imm < 1<<12 {
				return uint64(imm), true
			}
		}
	}
	return 0, false
}

// unsafeToSkip says why the probe may not move past in, or "" if it may:
// in must fall through, and leave the argument registers, the stack and
// frame pointers alone.
func unsafeToSkip(in x86asm.Inst, args []x86asm.Reg) string {
	switch in.Op {
	case x86asm.TEST, x86asm.CMP, x86asm.NOP, x86asm.BT:
		return "" // flags only
	case x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD, x86asm.LEA,
		x86asm.XOR, x86asm.AND, x86asm.OR, x86asm.ADD, x86asm.SUB, x86asm.SHR, x86asm.SHL,
		x86asm.CMOVNE, x86asm.CMOVE:
		dst, ok := in.Args[0].(x86asm.Reg)
		if !ok {
			return "a store to memory"
		}
		full := fullReg(dst)
		if full == x86asm.RSP || full == x86asm.RBP {
			return "a write to the stack or frame pointer"
		}
		for _, a := range args {
			if full == a {
				return "a write to an argument register"
			}
		}
		return ""
	}
	return fmt.Sprintf("%v is not known to be harmless", in.Op)
}

// fullReg maps a sub-register (EAX, AX, AL) to its 64-bit register.
func fullReg(r x86asm.Reg) x86asm.Reg {
	switch {
	case r >= x86asm.AL && r <= x86asm.R15B:
		if r >= x86asm.SPB && r <= x86asm.DIB {
			return x86asm.RSP + (r - x86asm.SPB)
		}
		if r >= x86asm.AH && r <= x86asm.BH {
			return x86asm.RAX + (r - x86asm.AH)
		}
		if r <= x86asm.BL {
			return x86asm.RAX + (r - x86asm.AL)
		}
		return x86asm.R8 + (r - x86asm.R8B)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return x86asm.RAX + (r - x86asm.AX)
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return x86asm.RAX + (r - x86asm.EAX)
	}
	return r
}

// jumpsInto reports, when some direct branch in code lands at or before
// off (but after the entry), why the probe cannot go at off: a call would
// pass it twice.
func jumpsInto(code []byte, off int) string {
	for pc := 0; pc < len(code); {
		if bytes.HasPrefix(code[pc:], endbr64) {
			pc += len(endbr64)
			continue
		}
		in, err := decode(code[pc:])
		if err != nil {
			// Padding or data after the code: nothing more to learn.
			return ""
		}
		if rel, ok := in.Args[0].(x86asm.Rel); ok {
			switch in.Op {
			case x86asm.CALL:
			default:
				t := pc + in.Len + int(rel)
				if t > 0 && t <= off {
					return fmt.Sprintf("a branch at +%d lands at +%d, before the probe", pc, t)
				}
			}
		}
		pc += in.Len
	}
	return ""
}
