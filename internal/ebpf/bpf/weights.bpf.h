// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): sampling weights: what a sampled block stands for.

//
// In aggregate mode with sampling (sample_rate R > 0) a sampled block of S
// bytes stands for S/p bytes and 1/p objects, p = 1 - e^(-S/R), the
// probability that it was sampled. The kernel keeps per-stack sums, so the
// weights are added here, per block, before they are summed (a sum of sizes
// cannot be unbiased afterwards: the weight is not linear in S), and the
// block remembers them so that its free takes away what it added.
//
// No floating point in BPF: with x = S/R in 32.32 fixed point,
// q = p/x = (1 - e^-x)/x, then S/p = R/q and 1/p = R/(S q). For x < 1/16,
// q is the series 1 - x/2 + x^2/6 - x^3/24 + x^4/120 (the next term is
// below 2e-9); above, e^-x = 2^-(x log2 e) from its 24 fraction bits, one
// multiply by 2^(-2^-i) in 1.31 fixed point per bit. x beyond 32 counts the
// block as itself (p = 1 - 1.3e-14). Both weights come out with 16
// fraction bits, within 2e-5 of exact (measured against math.Expm1 by
// TestSampleWeightsBPF, over sizes 1 to 2^46 and rates 1 to 2^40), and are
// rounded up or down at random with the probability of the fraction, so
// that the sums stay whole and unbiased.

#define FX_ONE31 (1ULL << 31)
#define LOG2E_26 96817625ULL // log2(e) in 6.26 fixed point

// exp2_frac is 2^(-2^-(i+1)) in 1.31 fixed point.
static __always_inline __u64 exp2_frac(int i)
{
	switch (i) {
	case 0:
		return 1518500250ULL;
	case 1:
		return 1805811301ULL;
	case 2:
		return 1969251188ULL;
	case 3:
		return 2056437387ULL;
	case 4:
		return 2101467502ULL;
	case 5:
		return 2124350982ULL;
	case 6:
		return 2135885998ULL;
	case 7:
		return 2141676973ULL;
	case 8:
		return 2144578345ULL;
	case 9:
		return 2146030505ULL;
	case 10:
		return 2146756953ULL;
	case 11:
		return 2147120270ULL;
	case 12:
		return 2147301951ULL;
	case 13:
		return 2147392798ULL;
	case 14:
		return 2147438222ULL;
	case 15:
		return 2147460935ULL;
	case 16:
		return 2147472292ULL;
	case 17:
		return 2147477970ULL;
	case 18:
		return 2147480809ULL;
	case 19:
		return 2147482228ULL;
	case 20:
		return 2147482938ULL;
	case 21:
		return 2147483293ULL;
	case 22:
		return 2147483471ULL;
	}
	return 2147483559ULL;
}

// exp_neg_fx returns e^-x in 1.31 fixed point, for x in 32.32 below 32.
static __always_inline __u64 exp_neg_fx(__u64 x)
{
	__u64 y = x * LOG2E_26 >> 26; // x log2 e, 32.32; x < 2^37: no overflow
	__u64 k = y >> 32, f = y >> 8 & 0xffffff;
	__u64 m = FX_ONE31;
#pragma unroll
	for (int i = 0; i < 24; i++) {
		__u64 bit = f >> (23 - i) & 1; // without a branch, as in neg_ln_fx
		m = m * (FX_ONE31 - bit * (FX_ONE31 - exp2_frac(i))) >> 31;
	}
	return m >> (k & 63);
}

// smp_q returns (1 - e^-x)/x in 32.32 fixed point, for x in 32.32 below
// 32: in (1/32, 1].
static __always_inline __u64 smp_q(__u64 x)
{
	if (x < (1ULL << 28)) {
		__u64 x2 = x * x >> 32, x3 = x2 * x >> 32, x4 = x3 * x >> 32;
		return (1ULL << 32) - x / 2 + x2 / 6 - x3 / 24 + x4 / 120;
	}
	__u64 p = FX_ONE31 - exp_neg_fx(x); // 1 - e^-x, 1.31, at least 0.06
	return (p << 29) / (x >> 4);
}

// smp_weights_fx sets *b and *o to the bytes and objects a sampled block
// of size bytes stands for at rate r (1 <= r <= 2^40), with 16 fraction
// bits.
static __always_inline void smp_weights_fx(__u64 size, __u64 r, __u64 *b, __u64 *o)
{
	if (!size) { // never sampled; stands for itself
		*b = 0;
		*o = 1 << 16;
		return;
	}
	if (size >= 32 * r) {
		*b = size << 16; // sizes that large failed: no block
		*o = 1 << 16;
		return;
	}
	// size < 32 r <= 2^45. x's error, 2^-18 at worst, moves q by half that.
	__u64 x = size < (1ULL << 31) ? (size << 32) / r : ((size << 18) / r) << 14;
	__u64 q = smp_q(x); // above 2^27
	// R/q with 16 fraction bits is r 2^48 / q, which overflows as one
	// product: divide twice. R/q <= R + size < 2^46.
	__u64 a = r << 20;
	__u64 b16 = ((a / q) << 28) + (((a % q) << 28) / q);
	*b = b16;
	*o = b16 / size;
}

// smp_weights returns a sampled block's weights at the session's rate,
// each rounded at random to a whole number.
static __always_inline void smp_weights(__u64 size, __u64 *bytes, __u64 *objs)
{
	__u64 b, o;
	smp_weights_fx(size, sample_rate, &b, &o);
	__u32 rnd = bpf_get_prandom_u32();
	*bytes = (b >> 16) + ((rnd & 0xffff) < (b & 0xffff));
	*objs = (o >> 16) + ((rnd >> 16) < (o & 0xffff));
}

// For TestSampleWeightsBPF (the loader does not load it): the weights of
// one size and rate, unrounded.
struct weights_args {
	__u64 size, rate;  // in
	__u64 bytes, objs; // out, 16 fraction bits
};

SEC("syscall")
int smp_weights_test(struct weights_args *a)
{
	__u64 b, o;
	smp_weights_fx(a->size, a->rate, &b, &o);
	a->bytes = b;
	a->objs = o;
	return 0;
}

// agg_alloc adds a block to the live table and its weights (*wb bytes, *wo
// objects) to its stack's totals: 0 (also for a failed allocation, which
// leaves nothing), 1 for a block it cannot key, -1 when a table has no room
// (the weights are set then too).
static __always_inline int agg_alloc(__u32 pidx, __u64 addr, __u64 size, __u64 stack, __u64 *wb, __u64 *wo)
{
	*wb = size;
	*wo = 1;
	if (!addr)
		return 0; // a failed allocation leaves nothing live
	if (addr & ~ADDR_MASK) {
		// Above 2^48 (only with 5-level page tables, when asked
		// for): no key for it.
		count(CTR_LOST_OTHER);
		return 1;
	}
	if (sample_rate)
		smp_weights(size, wb, wo);
	struct total_val *tv = total_of(pidx, stack);
	if (!tv)
		return -1;
	__u64 key = (__u64)pidx << PIDX_SHIFT | addr;
	long n = -1;
	if (!(families & FAMILY_FREE)) {
		// Frees are not traced: the block replaces the one that
		// was at its address. (With frees traced, an address is
		// not live twice.)
		n = live_find(key);
		if (n >= 0)
			set_key(&live_keys, n, key | KEY_BUSY);
	}
	if (n < 0)
		n = live_claim(key);
	if (n < 0)
		return -1;
	__u32 i = n;
	struct live_val *lv = bpf_map_lookup_elem(&live_vals, &i);
	if (!lv) {
		set_key(&live_keys, n, 0);
		return -1;
	}
	lv->size = size;
	lv->time = bpf_ktime_get_ns();
	lv->stack = stack;
	lv->wbytes = *wb;
	lv->wobjs = *wo;
	set_key(&live_keys, n, key);
	// Shared by CPUs, and the program may be preempted: atomics.
	__sync_fetch_and_add(&tv->allocs, *wo);
	__sync_fetch_and_add(&tv->alloc_bytes, *wb);
	return 0;
}

// agg_free removes a block from the live set: 0, or -1 when the table does
// not have it. What the stacks freed is not counted here: a block
// allocated while traced is either live or freed, so user space derives it
// from the totals and the live set.
static __always_inline int agg_free(__u32 pidx, __u64 addr)
{
	long n = live_find((__u64)pidx << PIDX_SHIFT | addr);
	if (n < 0)
		return -1;
	set_key(&live_keys, n, 0);
	return 0;
}

static __always_inline int spilled(__u32 pidx)
{
	__u8 *f = bpf_map_lookup_elem(&spilling, &pidx);
	return f && *f;
}

static __always_inline void send_event(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size, __u64 old_addr,
				       __u64 old_size, __u64 stack, __u8 spill, __u32 wobjs);

// agg_record accounts one call in the tables. What they cannot hold goes
// through the ring to user space, which keeps it (a spilled block, and the
// frees of a process that has spilled), rather than being lost: when not
// sampling, a table's size bounds only how much stays in the kernel.
static __always_inline void agg_record(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size, __u64 old_addr,
				       __u64 stack, __u32 pidx)
{
	__u8 spill = 0;
	int err = 0;
	__u64 wb = 0, wo = 0;
	switch (kind) {
	case KIND_ALLOC:
		err = agg_alloc(pidx, addr, size, stack, &wb, &wo);
		break;
	case KIND_FREE:
		if (agg_free(pidx, addr) < 0) {
			if (!sample_rate && spilled(pidx))
				spill = SPILL_OLD;
			else
				count(CTR_UNMATCHED);
		}
		break;
	case KIND_REALLOC:
		// realloc(p, n) that fails leaves p live; realloc(p, 0)
		// frees p and returns NULL.
		if (old_addr && (addr || !size) && agg_free(pidx, old_addr) < 0) {
			if (!sample_rate && spilled(pidx))
				spill = SPILL_OLD;
			else
				count(CTR_UNMATCHED);
		}
		err = agg_alloc(pidx, addr, size, stack, &wb, &wo);
		break;
	}
	if (err < 0 && !sample_rate) {
		__u8 one = 1;
		bpf_map_update_elem(&spilling, &pidx, &one, BPF_ANY);
		spill |= SPILL_NEW;
		err = 0;
	}
	if (err < 0)
		count(CTR_LOST_MAP_FULL);
	else if (spill)
		send_event(kind, func, heap, addr, size, old_addr, wb, stack, spill, (__u32)wo);
	else if (!err)
		count(CTR_DELIVERED);
}

// record sends one call to user space (stream) or into the tables
// (aggregate, where pidx is the process's index).
static __always_inline void record(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size, __u64 old_addr,
				   __u64 old_size, __u64 stack, __u32 pidx)
{
	if (aggregate)
		agg_record(kind, func, heap, addr, size, old_addr, stack, pidx);
	else
		send_event(kind, func, heap, addr, size, old_addr, old_size, stack, 0, 0);
}

// send_event puts one call in the ring.
static __always_inline void send_event(__u8 kind, __u8 func, __u8 heap, __u64 addr, __u64 size, __u64 old_addr,
				       __u64 old_size, __u64 stack, __u8 spill, __u32 wobjs)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	// Wake the consumer once each time the producer position enters a new
	// block of W bytes (a quarter of the ring), not for every event: a
	// wakeup is an inter-processor interrupt, which in a VM costs an exit.
	// The consumer sleeps only with the ring empty, so it is woken before
	// W bytes are queued. The position is read after the reservation and
	// the block claimed with a compare-and-swap, so that of CPUs reserving
	// at once exactly one wakes it. (Reading the queued bytes before the
	// reservation missed a crossing in nine, and races between CPUs more:
	// four missed in a row filled the ring while the consumer slept.)
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(CTR_LOST_RING_FULL);
		return;
	}
	__u64 wakeup = BPF_RB_NO_WAKEUP;
	__u64 block = bpf_ringbuf_query(&events, BPF_RB_PROD_POS) & wakeup_mask;
	__u64 last = wake_block;
	if (block != last && __sync_val_compare_and_swap(&wake_block, last, block) == last)
		wakeup = BPF_RB_FORCE_WAKEUP;
	e->time = bpf_ktime_get_ns();
	e->addr = addr;
	e->size = size;
	e->old_addr = old_addr;
	e->old_size = old_size;
	e->stack = stack;
	e->pid = tgid;
	e->tid = (__u32)id;
	e->kind = kind;
	e->func = func;
	e->heap = heap;
	e->spill = spill;
	e->wobjs = wobjs;
	bpf_ringbuf_submit(e, wakeup);
}
