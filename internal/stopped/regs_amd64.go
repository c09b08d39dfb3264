package stopped

// SP is the thread's stack pointer.
func (t Thread) SP() uint64 { return t.Regs.Rsp }

// FSBase is the thread's fs base, where glibc puts its thread control block
// (struct pthread, whose first words are tcbhead_t) on x86-64.
func (t Thread) FSBase() uint64 { return t.Regs.Fs_base }

// Words returns the thread's general registers, each as a word, in the
// order of struct user_regs_struct.
func (t Thread) Words() []uint64 {
	r := &t.Regs
	return []uint64{
		r.R15, r.R14, r.R13, r.R12, r.Rbp, r.Rbx, r.R11, r.R10, r.R9, r.R8,
		r.Rax, r.Rcx, r.Rdx, r.Rsi, r.Rdi, r.Orig_rax, r.Rip, r.Cs, r.Eflags,
		r.Rsp, r.Ss, r.Fs_base, r.Gs_base, r.Ds, r.Es, r.Fs, r.Gs,
	}
}
