#include "textflag.h"

// func rdtsc() uint64
// The fences keep the read after earlier loads and before later ones, as
// the interposer's timestamps are.
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	LFENCE
	RDTSC
	LFENCE
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET
