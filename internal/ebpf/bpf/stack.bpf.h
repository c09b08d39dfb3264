// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): the stack walk: frame pointers, the unwind tables (uw_find), the stack's hash and its map (take_stack).

static __always_inline __u64 read_user_u64(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

struct walk {
	struct stack *s;
	struct stack *old; // compare: the stored stack
	__u64 *win;	   // the thread's window
	// Unwinding with tables: the process's ranges, and the thread's rules
	// of the last stack's frames.
	struct uw_proc *uw;
	__u64 *rules;
	// The rest, in the thread's state (struct walk_vals): values in a map
	// are unknown to the verifier, which so checks each loop's body a few
	// times rather than once for each combination of the flags and counts
	// it could tell apart on the stack.
	struct walk_vals *v;
};

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0xff51afd7ed558ccdULL;
	return h ^ (h >> 32);
}

// load_window reads the user stack from at to the end of its page, at most
// WINDOW bytes and at least need: a read past the page could fault (at the
// top of a stack), and a read that faults costs several reads that do not.
static __always_inline void load_window(struct walk *w, __u64 at, __u64 need)
{
	__u64 len = PAGE_SIZE_ - (at & (PAGE_SIZE_ - 1));
	if (len > WINDOW)
		len = WINDOW;
	if (len < need)
		len = need;
	w->v->wbase = at;
	w->v->wlen = 0;
	if (len <= WINDOW && !bpf_probe_read_user(w->win, len, (void *)at))
		w->v->wlen = len;
}

// walk_step reads one frame: the return address above frame pointer fp,
// and the caller's frame pointer. A frame pointer lies above the last one,
// within the stack; anything else ends the chain (0 in the outermost frame,
// or a register of code built without frame pointers).
static long walk_step(__u32 i, struct walk *w)
{
	__u32 at = (i + 1) & 127;
	if (i + 1 >= MAX_FRAMES) {
		w->v->deep = 1;
		return 1;
	}
	if (!w->v->fp) {
		w->v->whole = 1; // the outermost frame clears it
		return 1;
	}
	if (w->v->fp < w->v->lo || w->v->fp - w->v->lo > MAX_STACK_SPAN || w->v->fp & 7)
		return 1;
	// The saved frame pointer and the return address, from the window
	// (which it leaves for the frame when it is not there).
	__u64 off = w->v->fp - w->v->wbase;
	if (w->v->fp < w->v->wbase || off + 16 > w->v->wlen) {
		load_window(w, w->v->fp, 16);
		off = 0;
	}
	if (off + 16 > w->v->wlen)
		return 1;
	__u32 k = (off >> 3) & (WINDOW / 8 - 1);
	__u64 fp = w->win[k], ret = w->win[k + 1];
	if (!ret) {
		w->v->whole = 1;
		return 1;
	}
	w->v->same &= w->s->ip[at] == ret;
	w->s->ip[at] = ret;
	w->v->hash = mix(w->v->hash, ret);
	w->v->n = at + 1;
	w->v->lo = w->v->fp + 16;
	w->v->fp = fp;
	return 0;
}

// wread reads the 8-byte-aligned word at addr of the user stack, from the
// window (which it moves to addr when addr is not in it).
static __always_inline int wread(struct walk *w, __u64 addr, __u64 *v)
{
	if (addr & 7)
		return -1;
	__u64 off = addr - w->v->wbase;
	if (addr < w->v->wbase || off + 8 > w->v->wlen) {
		load_window(w, addr, 8);
		off = 0;
	}
	if (off + 8 > w->v->wlen)
		return -1;
	*v = w->win[(off >> 3) & (WINDOW / 8 - 1)];
	return 0;
}

// uw_find returns the table entry for pc (a caller's: pc - 1 is looked up)
// in the process's ranges: 0 (fallback) where a table has no rule, and
// UW_NOTABLE where no table covers pc (a file without one, code not in a
// file).
__noinline __u64 uw_find(struct uw_proc *p, __u64 pc)
{
	if (!p)
		return UW_NOTABLE;
	__u32 n = p->n;
	if (n == 0 || n > UW_MAX_RANGES)
		return UW_NOTABLE;
	// The last range with start <= pc.
	__u32 lo = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		__u32 half = n >> 1;
		if (n > 1) {
			__u32 mid = (lo + half) & (UW_MAX_RANGES - 1);
			if (p->r[mid].start <= pc)
				lo = mid;
			n -= half;
		}
	}
	struct uw_range *r = &p->r[lo & (UW_MAX_RANGES - 1)];
	if (pc < r->start || pc >= r->end || r->count < 2)
		return UW_NOTABLE; // a file without a table has a range of count 0
	__u64 a = pc - r->bias;
	if (a >> 32)
		return 0;
	__u32 ci = r->chunk;
	void *chunk = bpf_map_lookup_elem(&uw_chunks, &ci);
	if (!chunk)
		return UW_NOTABLE; // freed meanwhile
	// The last entry with addr <= a.
	__u32 first = r->first, cnt = r->count, at = first;
	__u64 *e = bpf_map_lookup_elem(chunk, &at);
	if (!e || (__u32)*e > a)
		return 0;
#pragma unroll
	for (int i = 0; i < UW_SEARCH_STEPS; i++) {
		__u32 half = cnt >> 1;
		if (cnt > 1) {
			__u32 mid = at + half;
			e = bpf_map_lookup_elem(chunk, &mid);
			if (!e)
				return 0;
			if ((__u32)*e <= a)
				at = mid;
			cnt -= half;
		}
	}
	if (at == first + r->count - 1)
		return 0; // the end marker: past the covered range
	e = bpf_map_lookup_elem(chunk, &at);
	return e ? *e : 0;
}

// uw_step unwinds one frame with the tables, or by the frame pointer where
// they have no rule: from the frame of return address w->v->pc (stack pointer
// w->v->lo, rbp w->v->fp) to its caller's.
static long uw_step(__u32 i, struct walk *w)
{
	__u32 at = (i + 1) & 127;
	if (i + 1 >= MAX_FRAMES) {
		w->v->deep = 1;
		return 1;
	}
	// A frame of the thread's last stack, with all those before it the
	// same: its rule is the one found then.
	__u64 e;
	if (w->v->reuse && w->v->same) {
		e = w->rules[i & 127];
	} else {
		e = uw_find(w->uw, w->v->pc - 1);
		w->rules[i & 127] = e;
	}
	__u8 kind = e >> 48;
	__u64 off = (e >> 32) & 0xffff;
	__s8 aux = e >> 56;
	__u64 cfa, ret = 0, fp = w->v->fp;
	switch (kind) {
	case UW_KIND_END:
		w->v->whole = 1;
		return 1;
	case UW_KIND_RSP:
		cfa = w->v->lo + off;
		break;
	case UW_KIND_RBP:
		cfa = w->v->fp + off;
		break;
	case UW_KIND_PLT:
		cfa = w->v->lo + off + ((w->v->pc & 15) >= (__u8)aux ? 8 : 0);
		aux = 0;
		break;
	case UW_KIND_NOTABLE:
		w->v->notable = 1;
		// fall through
	default:
		// No rule: the frame pointer, if it is one (above the stack
		// pointer, within the stack; 0 in the outermost frame).
		count(CTR_UW_FALLBACK);
		if (!w->v->fp) {
			w->v->whole = 1;
			return 1;
		}
		if (w->v->fp < w->v->lo || w->v->fp - w->v->lo > MAX_STACK_SPAN)
			return 1;
		cfa = w->v->fp + 16;
		aux = -2;
	}
	if (cfa <= w->v->lo || cfa - w->v->lo > MAX_STACK_SPAN)
		return 1; // a caller's frame is above its callee's
	if (wread(w, cfa - 8, &ret))
		return 1;
	if (!ret) {
		w->v->whole = 1;
		return 1;
	}
	if (aux && wread(w, cfa + (__s64)aux * 8, &fp))
		return 1;
	w->v->same &= w->s->ip[at] == ret;
	w->s->ip[at] = ret;
	w->v->hash = mix(w->v->hash, ret);
	w->v->n = at + 1;
	w->v->pc = ret;
	w->v->lo = cfa;
	w->v->fp = fp;
	return 0;
}

// same_step compares frame i of the new stack with the stored one.
static long same_step(__u32 i, struct walk *w)
{
	i &= 127;
	__u64 want = i < w->v->n ? w->s->ip[i] : 0;
	if (w->old->ip[i] != want) {
		w->v->n = 0; // differs
		return 1;
	}
	return 0;
}

// stack_end counts how a stored stack's walk ended, when it did not reach
// the thread's first frame. A walk by frame pointer alone cannot tell
// (the C library's first frames have none): only a walk with tables is
// judged, whose tables mark the outermost frames.
static __always_inline void stack_end(struct walk *w)
{
	if (w->v->deep) {
		count(CTR_STACKS_CUT);
	} else if (!w->v->whole && w->uw) {
		count(CTR_STACKS_BROKEN);
		if (w->v->notable)
			count(CTR_STACKS_NOTABLE);
	}
}

// take_stack returns the key of the current user stack, walking the frame
// pointers from fp, above stack pointer sp. Its innermost frame (the return
// address into the allocator's caller) is first, or if first is 0 the word
// at ret, where the stack pointer was at the function's entry. It puts the
// stack together in the thread's scratch (per thread, not per CPU: a
// uprobe's program can be preempted by another thread's), where the last
// one stays: a stack the same as the thread's last needs no look-up. The
// key is a hash of the frames seeded with the process (stacks are scoped
// by process: one stack of two processes is two keys). It returns NO_STACK
// when the stack cannot be stored (the map is full, or another stack has
// its hash), after counting it lost. The loops are bpf_loop callbacks: the
// verifier checks each body once, and take_stack itself is a global
// function, checked once rather than where each program calls it.
__noinline __u64 take_stack(struct thread *t, __u64 first, __u64 fp, __u64 sp, __u64 ret)
{
	if (!t)
		return NO_STACK;
	struct stack *s = &t->scratch;
	struct walk w = {.s = s, .win = t->window, .v = &t->walk};
	t->walk = (struct walk_vals){.fp = fp, .lo = sp, .n = 1};
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	// One read for the return address and, usually, the first frames.
	load_window(&w, first ? sp : ret, 8);
	// The caller's stack pointer: at a return, sp; at an entry, above
	// the return address.
	__u64 csp = first ? sp : ret + 8;
	if (!first && w.v->wlen >= 8)
		first = t->window[0];
	w.v->same = t->last_stack != NO_STACK && s->ip[0] == first;
	s->ip[0] = first;
	w.v->hash = mix(0x9E3779B97F4A7C15ULL ^ tgid, first);
	if (uw) {
		w.uw = bpf_map_lookup_elem(&uw_procs, &tgid);
		if (!w.uw)
			count(CTR_STACKS_EARLY); // its ranges could not be loaded
	}
	if (w.uw) {
		w.v->pc = first;
		w.v->lo = csp;
		w.rules = t->rules;
		__u32 gen = w.uw->gen;
		w.v->reuse = t->rules_gen == gen;
		bpf_loop(MAX_FRAMES - 1, uw_step, &w, 0);
		t->rules_gen = gen;
	} else {
		bpf_loop(MAX_FRAMES - 1, walk_step, &w, 0);
	}
	// The loop ends after MAX_FRAMES - 1 steps: a stack that filled them
	// may go on.
	if (!w.v->whole && w.v->n >= MAX_FRAMES)
		w.v->deep = 1;
	__u32 n = w.v->n & 127;
	s->ip[n] = 0;
	if (w.v->same && n == t->last_n) {
		stack_end(&w);
		return t->last_stack; // stored, and checked, when it was taken
	}
	t->last_stack = NO_STACK;
	t->last_n = n;
	__u64 h = w.v->hash;
	if (h == NO_STACK)
		h = 1;

	if (bpf_map_lookup_elem(&known, &h)) {
		// User space has it.
		stack_end(&w);
		t->last_stack = h;
		return h;
	}
	struct stack *old = bpf_map_lookup_elem(&stacks, &h);
	if (old) {
		w.old = old;
		bpf_loop(n + 1, same_step, &w, 0); // the frames and the end
		if (w.v->n == 0) {		   // a different stack with the same hash
			count(CTR_STACKS_LOST);
			return NO_STACK;
		}
		stack_end(&w);
		t->last_stack = h;
		return h;
	}
	long err = bpf_map_update_elem(&stacks, &h, s, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: another CPU stored it */) {
		count(CTR_STACKS_LOST);
		return NO_STACK;
	}
	if (!err)
		count(CTR_STACKS_STORED);
	stack_end(&w);
	t->last_stack = h;
	return h;
}
