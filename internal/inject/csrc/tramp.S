/*
 * tramp.S: the code internal/inject runs in a thread it stopped, to call
 * functions of the process there (dlopen, then the interposer's entry
 * points) and give the thread back as it was, whether or not heapscope is
 * still there to see it end.
 *
 * The injector copies it, with the thread's registers to restore (the
 * s_* words), into the padding after the end of an executable segment
 * (the page is mapped, executable and unused there), writes a data block
 * (D_*) on the thread's stack below its red zone, and starts the thread at
 * tramp_start with rdi and rsp at the block. The code
 *   - blocks every signal, so that no handler of the program's runs inside
 *     the call, and saves the extended state (XSAVE; FXSAVE without it)
 *     and errno, which the call may change and the thread may be using;
 *   - calls D_FN(D_A0..D_A5) and keeps its result and errno;
 *   - makes a getpid system call at `marker`: the injector, tracing the
 *     thread's system calls, stops it there, reads the result and may set
 *     D_AGAIN (and a new D_FN and arguments) to make another call;
 *   - restores errno, the extended state, the signal mask and every
 *     register (from the s_* words, RIP-relative: no register is needed to
 *     find them) and jumps back to where the thread was.
 * Untraced (heapscope killed at any point), it runs the same way to the
 * end, so the thread is never left in the middle of it.
 *
 * Built by `go generate` (internal/inject/internal/gentramp) into
 * tramp_amd64.go; nothing here may need a relocation.
 */
	.intel_syntax noprefix
	.text

	/* the data block: the injector's words, then the code's */
	.globl D_FN, D_A0, D_A1, D_A2, D_A3, D_A4, D_A5, D_ERRNO_FN, D_XSIZE, D_AGAIN
	.globl D_RESULT, D_ERRNO, D_CALLS, D_OLDMASK, D_SAVED_ERRNO, D_SIZE
	.equ D_FN, 0          /* the function to call */
	.equ D_A0, 8          /* its arguments */
	.equ D_A1, 16
	.equ D_A2, 24
	.equ D_A3, 32
	.equ D_A4, 40
	.equ D_A5, 48
	.equ D_ERRNO_FN, 56   /* the C library's __errno_location */
	.equ D_XSIZE, 64      /* bytes of the XSAVE area, 0: FXSAVE (512) */
	.equ D_AGAIN, 72      /* set by the injector at the marker: call again */
	.equ D_RESULT, 80     /* out: the call's result (rax) */
	.equ D_ERRNO, 88      /* out: errno after the call (int) */
	.equ D_CALLS, 96      /* out: calls made */
	.equ D_OLDMASK, 104   /* the thread's signal mask, restored at the end */
	.equ D_SAVED_ERRNO, 112 /* the thread's errno, restored at the end */
	.equ D_SIZE, 128

	/* tramp_start, tramp_marker, tramp_end and the s_* words are local
	 * symbols: their offsets need no relocation, and the generator reads
	 * them from the symbol table */

tramp_start:
	mov r12, rdi                    /* r12: the data block, for the whole call */
	/* rt_sigprocmask(SIG_BLOCK, &all, &old, 8) */
	xor edi, edi
	lea rsi, [rip + allmask]
	lea rdx, [r12 + D_OLDMASK]
	mov r10d, 8
	mov eax, 14
	syscall
	/* the extended state, in an area below the stack pointer */
	mov rbx, [r12 + D_XSIZE]
	test rbx, rbx
	jnz 1f
	mov ebx, 512
1:	mov rax, rsp
	sub rax, rbx
	and rax, -64
	mov rsp, rax
	mov r13, rsp                    /* r13: the save area */
	cmp qword ptr [r12 + D_XSIZE], 0
	je 2f
	xor eax, eax                    /* XSAVE wants its header zeroed */
	mov [r13 + 512], rax
	mov [r13 + 520], rax
	mov [r13 + 528], rax
	mov [r13 + 536], rax
	mov [r13 + 544], rax
	mov [r13 + 552], rax
	mov [r13 + 560], rax
	mov [r13 + 568], rax
	mov eax, -1
	mov edx, -1
	xsave64 [r13]
	jmp 3f
2:	fxsave64 [r13]
3:	/* errno: r14 = __errno_location() */
	call [r12 + D_ERRNO_FN]
	mov r14, rax
	mov eax, [r14]
	mov [r12 + D_SAVED_ERRNO], eax
call_again:
	mov rdi, [r12 + D_A0]
	mov rsi, [r12 + D_A1]
	mov rdx, [r12 + D_A2]
	mov rcx, [r12 + D_A3]
	mov r8, [r12 + D_A4]
	mov r9, [r12 + D_A5]
	call [r12 + D_FN]
	mov [r12 + D_RESULT], rax
	mov eax, [r14]
	mov [r12 + D_ERRNO], eax
	add qword ptr [r12 + D_CALLS], 1
	/* the marker: getpid, where the injector stops the thread */
	mov eax, 39
	syscall
tramp_marker:
	cmp qword ptr [r12 + D_AGAIN], 0
	je 4f
	mov qword ptr [r12 + D_AGAIN], 0
	jmp call_again
4:	/* back as it was */
	mov eax, [r12 + D_SAVED_ERRNO]
	mov [r14], eax
	cmp qword ptr [r12 + D_XSIZE], 0
	je 5f
	mov eax, -1
	mov edx, -1
	xrstor64 [r13]
	jmp 6f
5:	fxrstor64 [r13]
6:	/* rt_sigprocmask(SIG_SETMASK, &old, NULL, 8) */
	mov edi, 2
	lea rsi, [r12 + D_OLDMASK]
	xor edx, edx
	mov r10d, 8
	mov eax, 14
	syscall
	push qword ptr [rip + s_rflags]
	popfq
	mov r15, [rip + s_r15]
	mov r14, [rip + s_r14]
	mov r13, [rip + s_r13]
	mov r12, [rip + s_r12]
	mov rbp, [rip + s_rbp]
	mov rbx, [rip + s_rbx]
	mov r11, [rip + s_r11]
	mov r10, [rip + s_r10]
	mov r9, [rip + s_r9]
	mov r8, [rip + s_r8]
	mov rax, [rip + s_rax]
	mov rcx, [rip + s_rcx]
	mov rdx, [rip + s_rdx]
	mov rsi, [rip + s_rsi]
	mov rdi, [rip + s_rdi]
	mov rsp, [rip + s_rsp]
	jmp [rip + s_rip]

	.balign 8
allmask: .quad -1
s_r15: .quad 0
s_r14: .quad 0
s_r13: .quad 0
s_r12: .quad 0
s_rbp: .quad 0
s_rbx: .quad 0
s_r11: .quad 0
s_r10: .quad 0
s_r9: .quad 0
s_r8: .quad 0
s_rax: .quad 0
s_rcx: .quad 0
s_rdx: .quad 0
s_rsi: .quad 0
s_rdi: .quad 0
s_rip: .quad 0
s_rflags: .quad 0
s_rsp: .quad 0
tramp_end:
