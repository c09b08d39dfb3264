/*
 * record.h: recording a call: entering a hook, capturing its stack, writing its
 * record, and the calls signal handlers make while this thread is busy
 * (queued, written when the interrupted hook is done).
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_RECORD_H
#define HEAPSCOPE_RECORD_H

static void fork_reset(void);

/* Enter our bookkeeping. Returns the thread's slot, or NULL to pass through. */
static inline struct hs_slot *enter(struct hs_tls *t)
{
	if (t->in_hook)
		return NULL;
	if (HS_UNLIKELY(g_forkcheck && *g_forkcheck == 0))
		fork_reset(); /* first call in a forked child */
	if (HS_UNLIKELY(t->swallow)) {
		t->swallow = 0;
		return NULL;
	}
	t->in_hook = HOOK_BUSY;
	struct hs_slot *s = t->slot;
	if (HS_UNLIKELY(!s || t->gen != g_gen)) {
		t->slot = NULL;
		s = attach(t, s);
		if (!s) {
			t->in_hook = 0;
			return NULL;
		}
	}
	return s;
}

static inline int leave_if_closed(uint32_t st)
{
	if (HS_UNLIKELY(st & HS_STATE_CLOSED)) {
		turn_off();
		return 1;
	}
	return 0;
}

/* Queue a call made by a signal handler that interrupted our bookkeeping
 * (HOOK_BUSY): async-signal-safe, it only fills an entry of the thread's
 * queue, which the interrupted hook writes out before it returns. */
static void defer_call(struct hs_tls *t, uint32_t func, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                       uint64_t c, uint64_t d, uintptr_t fp)
{
	uint32_t i = __atomic_fetch_add(&t->npend, 1, __ATOMIC_RELAXED);
	if (i >= HS_PEND) {
		__atomic_add_fetch(&t->pend_lost, 1, __ATOMIC_RELAXED);
		return;
	}
	struct hs_pend *e = &t->pend[i];
	e->func = func;
	e->kind = kind;
	e->nbody = nbody;
	e->a = a;
	e->b = b;
	e->c = c;
	e->d = d;
	volatile uint32_t *state = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
	uint32_t st = state ? __atomic_load_n(state, __ATOMIC_RELAXED) : 0;
	e->nframes = (st >> kind) & 1 ? (uint32_t)fp_walk(e->frames, (int)g_max_frames, fp, t->stack_lo, t->stack_hi) : 0;
	e->ts = hs_now();
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* Write a queued call; it is stamped no earlier than the ring's last
 * record (the hook it interrupted may have published after it). */
static void write_pend(struct hs_slot *s, struct hs_pend *e)
{
	uint32_t sid = 0;
	if (e->nframes && !stack_id(s, e->frames, (int)e->nframes, &sid)) {
		count_lost(s);
		return;
	}
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, e->nbody + 2, &nh, 0);
	if (w) {
		uint64_t last = __atomic_load_n(s->last_ts_p, __ATOMIC_RELAXED);
		uint64_t ts = e->ts > last ? e->ts : last;
		uint64_t body[4] = {e->a, e->b, e->c, e->d};
		w[0] = hdr(e->func, e->nbody + 2, sid);
		w[1] = ts;
		memcpy(w + 2, body, (size_t)e->nbody * 8);
		publish(s, nh, ts);
	} else {
		count_lost(s);
	}
	section_end(s);
}

/* Write what signal handlers queued while this thread was in its hook;
 * handlers may queue more meanwhile. */
static HS_NOINLINE void flush_pending(struct hs_tls *t, struct hs_slot *s)
{
	for (;;) {
		uint32_t n = __atomic_load_n(&t->npend, __ATOMIC_ACQUIRE);
		uint32_t lim = n < HS_PEND ? n : HS_PEND;
		for (; t->pdone < lim; t->pdone++)
			write_pend(s, &t->pend[t->pdone]);
		if (__atomic_compare_exchange_n(&t->npend, &n, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			break;
	}
	t->pdone = 0;
	for (uint32_t l = __atomic_exchange_n(&t->pend_lost, 0, __ATOMIC_RELAXED); l; l--)
		count_lost(s);
}

/*
 * A signal handler's call while this thread is in its hook but not writing
 * a record (no section open: walking the stack, say), or waiting for room
 * in the middle of one (make_room): the interrupted hook holds nothing that
 * a record written now would disturb (its section, if open, stays open
 * around this one, and it looks at the ring again once it wakes), so the
 * call is written at once, and waits for room itself. Its stack is walked
 * with frame pointers and defined without the thread's stack cache (which
 * the interrupted hook may be reading); if the interrupted hook holds the
 * stack table's lock, the call is queued instead.
 */
static void direct_call(struct hs_tls *t, uint32_t func, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                        uint64_t c, uint64_t d, uintptr_t fp)
{
	struct hs_slot *s = t->slot;
	uint32_t st = __atomic_load_n(g_state, __ATOMIC_RELAXED);
	if (st & HS_STATE_CLOSED)
		return;
	uint32_t sid = 0;
	if ((st >> kind) & 1) {
		uint64_t f[HS_MAX_FRAMES + 1];
		int n = fp_walk(f, (int)g_max_frames, fp, t->stack_lo, t->stack_hi);
		if (n && t->stack_locked) {
			defer_call(t, func, kind, nbody, a, b, c, d, fp);
			return;
		}
		struct hs_cache_ent scratch;
		if (n && !define_stack(s, f, n, hash_frames(f, n), __atomic_load_n(&g_dl_epoch, __ATOMIC_ACQUIRE), &scratch, &sid)) {
			count_lost(s);
			return;
		}
	}
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, nbody + 2, &nh, 0);
	if (w) {
		uint64_t ts = hs_now();
		uint64_t body[4] = {a, b, c, d};
		w[0] = hdr(func, nbody + 2, sid);
		w[1] = ts;
		memcpy(w + 2, body, (size_t)nbody * 8);
		publish(s, nh, ts);
	} else {
		count_lost(s);
	}
	section_end(s);
}

/* A call that arrived while this thread was inside a call of ours. */
static HS_NOINLINE void nested(struct hs_tls *t, uint32_t func, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                               uint64_t c, uint64_t d, uintptr_t fp)
{
	if (t->in_hook == HOOK_BUSY) {
		struct hs_slot *s = t->slot;
		if (s && t->gen == g_gen && g_mode == MODE_ON && (t->safe_point || s->depth == 0))
			direct_call(t, func, kind, nbody, a, b, c, d, fp);
		else
			defer_call(t, func, kind, nbody, a, b, c, d, fp);
	}
	/* HOOK_LIB: what our C library calls allocate comes from our own heap
	 * before it gets here (own.h); a free there of the program's block (the
	 * C library's own, replaced during our call) is not recorded. */
}

/* An event of 2..4 body words: [addr][size][old][oldsize]. */
static HS_INLINE void record(uint32_t func, uint32_t fam, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                          uint64_t c, uint64_t d, uintptr_t fp)
{
	struct hs_tls *t = &tls;
	if (HS_UNLIKELY(t->in_hook)) {
		nested(t, func, kind, nbody, a, b, c, d, fp);
		return;
	}
	struct hs_slot *s = enter(t);
	if (!s)
		return;
	uint32_t st = __atomic_load_n(g_state, __ATOMIC_RELAXED);
	if (leave_if_closed(st) || HS_UNLIKELY(!(g_families & fam)))
		goto out;
	uint32_t sid = 0;
	if ((st >> kind) & 1) {
		if (!capture(t, s, fp, &sid)) {
			count_lost(s);
			goto out;
		}
	}
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, nbody + 2, &nh, 0);
	if (HS_LIKELY(w != NULL)) {
		uint64_t ts = hs_now();
		w[0] = hdr(func, nbody + 2, sid);
		w[1] = ts;
		w[2] = a;
		if (nbody > 1)
			w[3] = b;
		if (nbody > 2)
			w[4] = c;
		if (nbody > 3)
			w[5] = d;
		publish(s, nh, ts);
	} else {
		count_lost(s);
	}
	section_end(s);
out:
	if (HS_UNLIKELY(__atomic_load_n(&t->npend, __ATOMIC_RELAXED)) && g_mode == MODE_ON)
		flush_pending(t, s);
	t->in_hook = HOOK_NONE;
}

#define TRACED(fam) (__atomic_load_n(&g_families, __ATOMIC_RELAXED) & (fam))

static HS_INLINE void rec_alloc(uint32_t func, uint32_t fam, void *p, uint64_t size, uintptr_t fp)
{
	if (TRACED(fam) && sample_alloc(p, size))
		record(func, fam, HS_KIND_ALLOC, 2, (uint64_t)(uintptr_t)p, size, 0, 0, fp);
}

#endif
