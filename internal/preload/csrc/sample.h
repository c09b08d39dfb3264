/*
 * sample.h: sampling mode of the interposer (included once, by
 * heapscope_preload.c, after the thread state).
 *
 * With a sampling rate R (HS_CTL_SAMPLE_RATE > 0), each thread counts down
 * the bytes it allocates from a distance drawn from an exponential
 * distribution of mean R, as tcmalloc and Go's runtime do. The allocation
 * that takes the countdown to zero or below is recorded, with its stack, and
 * a new distance is drawn: an allocation of S bytes is recorded with
 * probability 1 - exp(-S/R), which is what the analysis side unbiases with.
 * All other allocations are not recorded.
 *
 * The addresses of the live recorded blocks are kept in a small open
 * addressing set, so that their free and realloc are recorded and those of
 * other blocks are not. The free path looks an address up without a lock:
 * at a load of at most 1/4, an unrecorded block's lookup usually stops at
 * its first, empty, slot. Only a hit (a recorded block, rare) takes the lock
 * and confirms. Slots go empty -> address -> tombstone -> address, and a
 * slot returns to empty only when the slot after it is empty, so a lookup
 * never passes an empty slot on the way to an address that is present.
 * Tables replaced by a bigger one are kept, never unmapped: a lookup may
 * still be reading one.
 *
 * The hooks run at the wrappers' entry and return whether the event is
 * recorded; a call nested in our own bookkeeping or swallowed by a C++
 * operator passes through to record(), which deals with it.
 */
#ifndef HEAPSCOPE_SAMPLE_H
#define HEAPSCOPE_SAMPLE_H

#define HS_SMP_UNKNOWN UINT64_MAX /* not connected yet: the rate is not known */

static uint64_t g_smp_rate = HS_SMP_UNKNOWN; /* 0: record every event */
static uint64_t g_smp_seed;
static uint64_t g_smp_threads;

static __thread struct {
	int64_t left; /* bytes until the next sampled allocation */
	uint64_t rng; /* xorshift64* state; 0 until the thread's first draw */
} smp_tls __attribute__((tls_model("initial-exec")));

static inline struct hs_slot *enter(struct hs_tls *t);

static pthread_mutex_t g_sset_lock __attribute__((aligned(64))) = PTHREAD_MUTEX_INITIALIZER;

static void sset_lock(void) { pthread_mutex_lock(&g_sset_lock); }
static void sset_unlock(void) { pthread_mutex_unlock(&g_sset_lock); }

/* Called with the control block when the process first connects (an
 * injected process: at each session's start). */
static void sample_configure(const uint8_t *ctl)
{
	uint64_t r = *(const uint64_t *)(ctl + HS_CTL_SAMPLE_RATE);
	g_smp_seed = *(const uint64_t *)(ctl + HS_CTL_SAMPLE_SEED);
	usdt_configure(ctl); /* each session anew: one without --emit-usdt turns the probes off */
	static int atfork;   /* an injected process has one session after another: once */
	if (r != 0 && !atfork) {
		atfork = 1;
		IN_LIB(pthread_atfork(sset_lock, sset_unlock, sset_unlock)); /* may allocate; a child never inherits a held lock */
	}
	__atomic_store_n(&g_smp_rate, r, __ATOMIC_RELEASE);
}

/* ---- the distance to the next sample ----------------------------------- */

static inline uint64_t smp_mix(uint64_t x) /* splitmix64's finalizer */
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* ln(u) for u in (0, 1], without libm: u = m * 2^e, ln m by the atanh
 * series, which converges fast for m in [1, 2); relative error < 1e-8. */
static double smp_ln(double u)
{
	union {
		double d;
		uint64_t i;
	} b = {u};
	int e = (int)((b.i >> 52) & 0x7ff) - 1023;
	b.i = (b.i & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
	double s = (b.d - 1) / (b.d + 1), s2 = s * s;
	double l = 2 * s *
	           (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11 + s2 / 13))))));
	return e * 0.6931471805599453 + l;
}

/* A distance drawn from the exponential distribution of mean r, at least 1. */
static HS_NOINLINE int64_t smp_next(uint64_t r)
{
	uint64_t x = smp_tls.rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	smp_tls.rng = x;
	double u = (double)(((x * 0x2545f4914f6cdd1dull) >> 11) + 1) * 0x1p-53; /* (0, 1] */
	double d = -smp_ln(u) * (double)r;
	return d >= 0x1p62 ? (int64_t)1 << 62 : (int64_t)d + 1;
}

/* The countdown reached zero: either the thread's first allocation (draw the
 * first distance, then count this one) or a sample. */
static HS_NOINLINE int smp_slow(int64_t n, uint64_t r)
{
	if (smp_tls.rng == 0) {
		uint64_t seed = g_smp_seed;
		uint64_t k = __atomic_add_fetch(&g_smp_threads, 1, __ATOMIC_RELAXED);
		seed = seed ? seed + k : __rdtsc() ^ (uint64_t)(uintptr_t)&smp_tls;
		smp_tls.rng = smp_mix(seed) | 1;
		smp_tls.left = smp_next(r) - n;
		if (smp_tls.left > 0)
			return 0;
	}
	smp_tls.left = smp_next(r);
	return 1;
}

/* Whether an allocation of n bytes is sampled. */
static HS_INLINE int smp_draw(uint64_t n, uint64_t r)
{
	int64_t s = n > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)n;
	smp_tls.left -= s;
	if (HS_LIKELY(smp_tls.left > 0))
		return 0;
	return smp_slow(s, r);
}

/* ---- the set of sampled blocks ----------------------------------------- */

#define SSET_EMPTY 0
#define SSET_TOMB 1 /* never an address: blocks are aligned */
#define SSET_MIN 4096

struct hs_sset {
	/* read by every lookup: kept off the line the writers dirty */
	uint64_t mask, shift;
	uint64_t used __attribute__((aligned(64))), tombs;
	uint64_t slots[] __attribute__((aligned(64)));
};

static struct hs_sset *g_sset __attribute__((aligned(64)));

static inline uint64_t sset_home(const struct hs_sset *t, uint64_t a)
{
	return (a * 0x9e3779b97f4a7c15ull) >> t->shift;
}

/* Lock-free: 0 if a is surely not sampled, 1 if it may be. */
static HS_INLINE int sset_maybe(uint64_t a)
{
	struct hs_sset *t = __atomic_load_n(&g_sset, __ATOMIC_ACQUIRE);
	if (!t)
		return 0;
	for (uint64_t i = sset_home(t, a);; i = (i + 1) & t->mask) {
		uint64_t v = __atomic_load_n(&t->slots[i], __ATOMIC_RELAXED);
		if (v == a)
			return 1;
		if (v == SSET_EMPTY)
			return 0;
	}
}

/* The slot holding a in t, or -1. With the lock held. */
static int64_t sset_find(struct hs_sset *t, uint64_t a)
{
	for (uint64_t i = sset_home(t, a);; i = (i + 1) & t->mask) {
		uint64_t v = t->slots[i];
		if (v == a)
			return (int64_t)i;
		if (v == SSET_EMPTY)
			return -1;
	}
}

/* A table of at least 4 times the live entries, with them in it. */
static int sset_rebuild(void)
{
	struct hs_sset *o = g_sset;
	uint64_t used = o ? o->used : 0, cap = SSET_MIN, bits = 12;
	while (cap < (used + 1) * 8) {
		cap <<= 1;
		bits++;
	}
	size_t bytes = sizeof(struct hs_sset) + cap * 8;
	void *m = (void *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 0;
	struct hs_sset *t = m;
	t->mask = cap - 1;
	t->shift = 64 - bits;
	for (uint64_t i = 0; o && i <= o->mask; i++) {
		uint64_t v = o->slots[i];
		if (v == SSET_EMPTY || v == SSET_TOMB)
			continue;
		uint64_t j = sset_home(t, v);
		while (t->slots[j] != SSET_EMPTY)
			j = (j + 1) & t->mask;
		t->slots[j] = v;
		t->used++;
	}
	__atomic_store_n(&g_sset, t, __ATOMIC_RELEASE); /* o is kept: lookups may be reading it */
	return 1;
}

static void sset_insert(uint64_t a)
{
	sset_lock();
	struct hs_sset *t = g_sset;
	if (!t || (t->used + 1) * 4 > t->mask + 1 || (t->used + t->tombs + 1) * 2 > t->mask + 1) {
		if (!sset_rebuild())
			goto out; /* no memory: the block's free goes unrecorded */
		t = g_sset;
	}
	int64_t tomb = -1;
	uint64_t i = sset_home(t, a);
	for (;; i = (i + 1) & t->mask) {
		uint64_t v = t->slots[i];
		if (v == a)
			goto out; /* already there: a realloc raced with a free */
		if (v == SSET_TOMB && tomb < 0)
			tomb = (int64_t)i;
		if (v == SSET_EMPTY)
			break;
	}
	if (tomb >= 0) {
		i = (uint64_t)tomb;
		t->tombs--;
	}
	__atomic_store_n(&t->slots[i], a, __ATOMIC_RELAXED);
	t->used++;
out:
	sset_unlock();
}

/* Removes a; returns whether it was there. */
static int sset_remove(uint64_t a)
{
	sset_lock();
	struct hs_sset *t = g_sset;
	int64_t at = t ? sset_find(t, a) : -1;
	if (at >= 0) {
		uint64_t i = (uint64_t)at;
		t->used--;
		if (t->slots[(i + 1) & t->mask] != SSET_EMPTY) {
			__atomic_store_n(&t->slots[i], SSET_TOMB, __ATOMIC_RELAXED);
			t->tombs++;
		} else {
			/* the end of a run: it and the tombstones before it empty */
			__atomic_store_n(&t->slots[i], SSET_EMPTY, __ATOMIC_RELAXED);
			for (i = (i - 1) & t->mask; t->slots[i] == SSET_TOMB; i = (i - 1) & t->mask) {
				__atomic_store_n(&t->slots[i], SSET_EMPTY, __ATOMIC_RELAXED);
				t->tombs--;
			}
		}
	}
	sset_unlock();
	return at >= 0;
}

/* ---- the hooks ----------------------------------------------------------- */

/* Connects (which reads the rate) from an allocation made before the
 * process's first event; returns the rate, or HS_SMP_UNKNOWN. */
static HS_NOINLINE uint64_t smp_connect(void)
{
	struct hs_tls *t = &tls;
	if (enter(t))
		t->in_hook = 0;
	return __atomic_load_n(&g_smp_rate, __ATOMIC_ACQUIRE);
}

/* Whether the allocation of n bytes at p is recorded. */
static HS_INLINE int sample_alloc(void *p, uint64_t n)
{
	uint64_t r = __atomic_load_n(&g_smp_rate, __ATOMIC_RELAXED);
	if (HS_LIKELY(r == 0) || HS_UNLIKELY(tls.in_hook | tls.swallow))
		return 1;
	if (HS_UNLIKELY(r == HS_SMP_UNKNOWN)) {
		r = smp_connect();
		if (r == 0 || r == HS_SMP_UNKNOWN)
			return 1;
	}
	if (!p || HS_LIKELY(!smp_draw(n, r)))
		return 0; /* a failed allocation is not drawn nor recorded: it makes no block */
	sset_insert((uint64_t)(uintptr_t)p);
	usdt_alloc(p, n, r);
	return 1;
}

/* Whether the free of p is recorded: only a sampled block's. */
static HS_INLINE int sample_free(void *p)
{
	uint64_t r = __atomic_load_n(&g_smp_rate, __ATOMIC_RELAXED);
	if (HS_LIKELY(r == 0) || HS_UNLIKELY(tls.in_hook | tls.swallow) || r == HS_SMP_UNKNOWN)
		return 1;
	if (HS_LIKELY(!sset_maybe((uint64_t)(uintptr_t)p)))
		return 0;
	return usdt_freed(p, sset_remove((uint64_t)(uintptr_t)p));
}

/*
 * A realloc's result is a new draw at its new size, whatever its old block
 * was, so that the live sampled blocks are always a Poisson sample of the
 * live heap and each realloc counts with the weight of its own size:
 *  - old block sampled, result sampled: the realloc is recorded;
 *  - old block not sampled (or NULL), result sampled: recorded as an
 *    allocation (a realloc from address 0);
 *  - old block sampled, result not: the old block leaves the sample,
 *    recorded as its free;
 *  - neither: nothing.
 * A failed realloc (NULL for a size above 0) makes no block: it is not
 * drawn, except that a sampled old block's failed realloc is drawn as
 * the eBPF provider draws it (at the call, before the result is known)
 * and recorded when sampled. realloc(p, 0) is a draw of 0 bytes: never
 * sampled. The eBPF provider follows the same rule
 * (internal/ebpf/bpf/heapscope.bpf.c).
 */

/* realloc(p, ...) is about to run: what p is. Taken out of the set before
 * the block can be released and handed to another thread. */
#define SMP_NEW 0   /* p is NULL or not sampled */
#define SMP_WAS 1   /* p was sampled */
#define SMP_EXACT 2 /* not sampling, or a nested call: record() decides */

/* What sample_realloc_end says to record. */
#define SMP_REC_NONE 0
#define SMP_REC_REALLOC 1 /* the realloc (from address 0 when *old was set to NULL) */
#define SMP_REC_FREE 2    /* the free of the old block: it left the sample */

static HS_INLINE int sample_realloc_begin(void *p)
{
	uint64_t r = __atomic_load_n(&g_smp_rate, __ATOMIC_RELAXED);
	if (HS_LIKELY(r == 0) || HS_UNLIKELY(tls.in_hook | tls.swallow) || r == HS_SMP_UNKNOWN)
		return SMP_EXACT;
	if (!p || HS_LIKELY(!sset_maybe((uint64_t)(uintptr_t)p)))
		return SMP_NEW;
	return usdt_freed(p, sset_remove((uint64_t)(uintptr_t)p)) ? SMP_WAS : SMP_NEW;
}

/* realloc(*old, n) returned q: what is recorded (SMP_REC_*). A new draw
 * that is sampled from an old block that was not is recorded as an
 * allocation (*old = NULL). */
static HS_INLINE int sample_realloc_end(int how, void **old, void *q, uint64_t n)
{
	if (how == SMP_EXACT)
		return SMP_REC_REALLOC;
	uint64_t r = __atomic_load_n(&g_smp_rate, __ATOMIC_RELAXED);
	if (!q && n != 0) { /* failed: the old block, if any, is still there */
		if (how != SMP_WAS)
			return SMP_REC_NONE;
		sset_insert((uint64_t)(uintptr_t)*old);
		return smp_draw(n, r) ? SMP_REC_REALLOC : SMP_REC_NONE;
	}
	if (q && n != 0 && smp_draw(n, r)) {
		sset_insert((uint64_t)(uintptr_t)q);
		usdt_alloc(q, n, r);
		if (how != SMP_WAS)
			*old = NULL;
		return SMP_REC_REALLOC;
	}
	return how == SMP_WAS ? SMP_REC_FREE : SMP_REC_NONE;
}

#endif
