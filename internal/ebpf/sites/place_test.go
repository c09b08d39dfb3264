package sites

import (
	"testing"
)

// Machine code for the cases below, as GCC and glibc emit it.
var (
	testRDI  = []byte{0x48, 0x85, 0xff}             // test %rdi,%rdi
	je32     = []byte{0x0f, 0x84, 0xbf, 0, 0, 0}    // je .+0xbf
	je8      = []byte{0x74, 0x10}                   // je .+0x10
	pushRBP  = []byte{0x55}                         // push %rbp
	pushRBX  = []byte{0x53}                         // push %rbx
	pushR12  = []byte{0x41, 0x54}                   // push %r12
	cmpbRIP  = []byte{0x80, 0x3d, 1, 2, 3, 0, 0}    // cmpb $0x0,0x30201(%rip)
	subRSP8  = []byte{0x48, 0x83, 0xec, 0x08}       // sub $0x8,%rsp
	callRel  = []byte{0xe8, 0, 0, 0, 0}             // call .+0
	movRDI   = []byte{0x48, 0x89, 0xc7}             // mov %rax,%rdi
	movEAX1  = []byte{0xb8, 1, 0, 0, 0}             // mov $0x1,%eax
	movRSPBP = []byte{0x48, 0x89, 0xe5}             // mov %rsp,%rbp
	ret      = []byte{0xc3}                         // ret
	jmpBack  = []byte{0xeb, 0x00}                   // jmp .+0 (patched per case)
	nop5     = []byte{0x0f, 0x1f, 0x44, 0x00, 0x00} // nopl 0x0(%rax,%rax,1)
)

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestPlace(t *testing.T) {
	for _, c := range []struct {
		name     string
		code     []byte
		role     Role
		offset   uint64
		emulated bool
		sp       uint64
	}{
		{"emulated entry", cat(pushR12, pushRBP, ret), RoleAlloc, 0, true, 0},
		{"free steps over its NULL test", cat(testRDI, je32, pushRBP, ret), RoleFree, 9, true, 0},
		{"free with a short NULL branch", cat(testRDI, je8, pushRBX, ret), RoleFree, 5, true, 0},
		{"alloc stops at the branch, which NULL does not decide", cat(testRDI, je8, pushRBX, ret), RoleAlloc, 3, true, 0},
		{"flag test before the first push", cat(cmpbRIP, pushR12, ret), RoleAlloc, 7, true, 0},
		{"endbr64 is stepped over", cat(endbr64, testRDI, movEAX1, pushRBX, ret), RoleWrapAlloc, 12, true, 0},
		{"a nop is emulated", cat(cmpbRIP, nop5, ret), RoleAlloc, 7, true, 0},
		{"stack moved: entry-only role follows it", cat(endbr64, subRSP8, callRel, ret), RoleWrapAlloc, 8, true, 8},
		{"stack moved: a return probe cannot", cat(endbr64, subRSP8, callRel, ret), RoleAlloc, 0, false, 0},
		{"argument overwritten", cat(movRDI, pushRBX, ret), RoleFree, 0, false, 0},
		{"frame pointer set", cat(movRSPBP, pushRBX, ret), RoleWrapFree, 0, false, 0},
		{"returns before anything emulated", cat(testRDI, ret), RoleFree, 0, false, 0},
		{"empty", nil, RoleFree, 0, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Place(c.code, c.role)
			if p.Offset != c.offset || p.Emulated != c.emulated || p.SPDelta != c.sp {
				t.Errorf("Place = %+v, want offset %d emulated %v sp %d", p, c.offset, c.emulated, c.sp)
			}
			if !p.Emulated && p.Reason == "" {
				t.Errorf("no reason given for an entry placement: %+v", p)
			}
		})
	}
}

// A branch back to an instruction before the probe would make one call pass
// the probe twice.
func TestPlaceBranchIntoPrologue(t *testing.T) {
	// cmpb; push %r12; ...; jmp back to +3 (inside the cmpb: anything
	// before or at the probe counts).
	code := cat(cmpbRIP, pushR12, pushRBX, jmpBack)
	off := len(code) - 2
	code[off+1] = byte(int8(3 - (off + 2)))
	if p := Place(code, RoleAlloc); p.Emulated || p.Offset != 0 {
		t.Errorf("Place = %+v, want the entry", p)
	}
	// A branch to after the probe is fine.
	code = cat(cmpbRIP, pushR12, pushRBX, jmpBack)
	code[off+1] = byte(int8(9 - (off + 2)))
	if p := Place(code, RoleAlloc); !p.Emulated || p.Offset != 7 {
		t.Errorf("Place = %+v, want +7", p)
	}
}

func TestEmulated(t *testing.T) {
	for _, c := range []struct {
		raw  []byte
		want bool
	}{
		{pushRBP, true}, {pushR12, true}, {callRel, true}, {je8, true}, {je32, true},
		{[]byte{0xe9, 0, 0, 0, 0}, true}, {[]byte{0x90}, true}, {nop5, true},
		{testRDI, false}, {endbr64, false}, {subRSP8, false}, {ret, false},
		{[]byte{0x66, 0xe8, 0, 0}, false},             // 16-bit call: the kernel refuses
		{[]byte{0x48, 0x50}, false},                   // push with REX.W: not emulated
		{[]byte{0x0f, 0x1f, 0x44, 0x00, 0x01}, false}, // not one of the kernel's nops
	} {
		if got := emulated(c.raw); got != c.want {
			t.Errorf("emulated(% x) = %v, want %v", c.raw, got, c.want)
		}
	}
}

func FuzzPlace(f *testing.F) {
	f.Add(cat(testRDI, je32, pushRBP, ret), uint8(RoleFree))
	f.Add(cat(endbr64, subRSP8, callRel, ret), uint8(RoleWrapAlloc))
	f.Fuzz(func(t *testing.T, code []byte, r uint8) {
		p := Place(code, Role(r%4))
		if p.Offset > uint64(len(code)) {
			t.Errorf("offset %d beyond %d bytes", p.Offset, len(code))
		}
	})
}
