// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): sampling: the decision at an allocation's entry.

//
// As the interposer does (internal/preload/csrc/sample.h): each thread
// counts down the bytes it allocates from a distance drawn from the
// exponential distribution of mean R; the allocation that takes the
// countdown to zero or below is sampled, and a new distance is drawn. An
// allocation of S bytes is sampled with probability 1 - exp(-S/R), which
// the analysis side unbiases. The decision is taken at the allocation's
// entry (the size is an argument): an allocation not sampled takes no
// stack and sends nothing; only its traps remain.

// neg_ln_fx returns -ln(v / 2^32) in 16.16 fixed point, for v in [1, 2^32].
// log2 v = e + log2 m with m = v / 2^e in [1, 2); the 16 bits of log2 m's
// fraction come from squaring m (each square that reaches 2 is a 1 bit).
// Truncation errs by less than 2^-16 in log2 and 2^-16 in the product
// with ln 2: -ln u is within 1.6e-5 of exact, and the mean distance within
// 1e-5 of R (the same arithmetic over 400000 draws in Python: largest error
// 1.52e-5, mean 2.3e-6 low). With u of 32 bits the distribution is cut at
// 22.2 R, a 2^-32 chance.
static __always_inline __u64 neg_ln_fx(__u64 v)
{
	__u64 e = 0, x = v;
	if (x >> 32) {
		x >>= 32;
		e += 32;
	}
	if (x >> 16) {
		x >>= 16;
		e += 16;
	}
	if (x >> 8) {
		x >>= 8;
		e += 8;
	}
	if (x >> 4) {
		x >>= 4;
		e += 4;
	}
	if (x >> 2) {
		x >>= 2;
		e += 2;
	}
	if (x >> 1)
		e += 1;
	// m in 1.31 fixed point: [2^31, 2^32).
	__u64 m = e <= 31 ? v << (31 - e) : v >> (e - 31);
	__u64 frac = 0;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		m = (m * m) >> 31;
		__u64 bit = m >> 32; // without a branch: 16 of them would be 2^16 paths to verify
		m >>= bit;
		frac = frac << 1 | bit;
	}
	__u64 nl2 = (32ULL << 16) - ((e << 16) | frac); // -log2 u, 16.16
	return nl2 * 2977044472ULL >> 32;		// ln 2 in 0.32 fixed point
}

// smp_next draws a distance from the exponential distribution of mean
// sample_rate, at least 1.
static __always_inline __s64 smp_next(void)
{
	__u64 v = (__u64)bpf_get_prandom_u32() + 1;		// u = v / 2^32 in (0, 1]
	return (__s64)((neg_ln_fx(v) * sample_rate) >> 16) + 1; // < 2^21 * 2^40
}

// smp_draw counts an allocation of n bytes down the thread's countdown and
// returns whether it is sampled.
static __always_inline int smp_draw(struct thread *t, __u64 n)
{
	__s64 s = n > (1ULL << 62) ? (1LL << 62) : (__s64)n;
	if (!t->smp_init) {
		t->smp_init = 1;
		t->smp_left = smp_next();
	}
	t->smp_left -= s;
	if (t->smp_left > 0)
		return 0;
	t->smp_left = smp_next();
	return 1;
}

static __always_inline struct smp_key smp_key_of(__u64 addr)
{
	struct smp_key k = {.addr = addr, .pid = bpf_get_current_pid_tgid() >> 32};
	return k;
}

// smp_known returns whether addr is a sampled block of this process (of
// index pidx, in aggregate mode, whose live table holds exactly the sampled
// blocks: the sampled map is not used there).
static __always_inline int smp_known(__u64 addr, __u32 pidx)
{
	if (aggregate)
		return !(addr & ~ADDR_MASK) && live_find((__u64)pidx << PIDX_SHIFT | addr) >= 0;
	struct smp_key k = smp_key_of(addr);
	return bpf_map_lookup_elem(&sampled, &k) != 0;
}

// smp_forget takes addr out of the sampled blocks; 1 if it was there.
static __always_inline int smp_forget(__u64 addr)
{
	struct smp_key k = smp_key_of(addr);
	return bpf_map_delete_elem(&sampled, &k) == 0;
}

// smp_keep adds addr to the sampled blocks; 0, or an error when full.
static __always_inline long smp_keep(__u64 addr)
{
	struct smp_key k = smp_key_of(addr);
	__u8 one = 1;
	return bpf_map_update_elem(&sampled, &k, &one, BPF_ANY);
}
