// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// A part of heapscope.bpf.c, included by it once and in order (not a
// header of its own: it uses what the parts before it define): aggregate mode: live blocks and per-stack totals kept in maps.

// fmix64 is MurmurHash3's finalizer: block addresses differ in few bits.
static __always_inline __u64 fmix64(__u64 k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

// bucket_of returns the c'th (0 or 1) bucket of hash h.
static __always_inline struct bucket *bucket_of(void *keys, __u32 mask, __u64 h, int c, __u32 *index)
{
	*index = (c ? (__u32)(h >> 32) : (__u32)h) & mask;
	return bpf_map_lookup_elem(keys, index);
}

static __always_inline long find_in(void *keys, __u32 mask, __u64 key)
{
	__u64 h = fmix64(key);
	for (int c = 0; c < 2; c++) {
		__u32 bi;
		struct bucket *b = bucket_of(keys, mask, h, c, &bi);
		if (!b)
			return -1;
		for (__u32 i = 0; i < BUCKET_SLOTS; i++)
			if (b->key[i] == key)
				return bi * BUCKET_SLOTS + i;
	}
	return -1;
}

// free_slots counts a bucket's free slots without a branch (each would
// double the paths the verifier walks). The shift is in asm, or clang
// turns it back into a comparison and a branch.
static __always_inline __u64 free_slots(struct bucket *b)
{
	__u64 used = 0;
	for (__u32 i = 0; i < BUCKET_SLOTS; i++) {
		__u64 k = b->key[i];
		__u64 nz = k | -k;
		asm volatile("%0 >>= 63" : "+r"(nz)); // 1 unless k is 0
		used += nz;
	}
	return BUCKET_SLOTS - used;
}

static __always_inline long claim_in(struct bucket *b, __u32 bi, __u64 key)
{
	for (__u32 i = 0; i < BUCKET_SLOTS; i++)
		if (b->key[i] == 0 && __sync_val_compare_and_swap(&b->key[i], 0, key | KEY_BUSY) == 0)
			return bi * BUCKET_SLOTS + i;
	return -1;
}

// The emptier bucket first keeps a table from overflowing until it is
// about three quarters full (the first bucket first would at a third).
static __always_inline long claim(void *keys, __u32 mask, __u64 key)
{
	__u64 h = fmix64(key);
	__u32 i0, i1;
	struct bucket *b0 = bucket_of(keys, mask, h, 0, &i0);
	struct bucket *b1 = bucket_of(keys, mask, h, 1, &i1);
	if (!b0 || !b1)
		return -1;
	long n = -1;
	if (free_slots(b1) > free_slots(b0))
		n = claim_in(b1, i1, key);
	if (n < 0)
		n = claim_in(b0, i0, key);
	if (n < 0)
		n = claim_in(b1, i1, key);
	return n;
}

// The table operations are global functions, which the verifier checks
// once each: inlined, their paths multiply at every call.

// live_find returns the slot of key in the live table, or -1.
__noinline long live_find(__u64 key)
{
	return find_in(&live_keys, live_mask, key);
}

// live_claim takes a free slot for key in the live table, marked busy
// until publish, or returns -1 if both its buckets are full.
__noinline long live_claim(__u64 key)
{
	return claim(&live_keys, live_mask, key);
}

__noinline long totals_find(__u64 key)
{
	return find_in(&totals_keys, totals_mask, key);
}

__noinline long totals_claim(__u64 key)
{
	return claim(&totals_keys, totals_mask, key);
}

// set_key stores the key of slot n. publish (with a busy slot's key
// without KEY_BUSY) ends the filling in of a claimed slot, which readers
// (user space) skip: they never see a key with an old value. Storing 0
// frees a slot.
static __always_inline void set_key(void *keys, long n, __u64 key)
{
	__u32 bi = (__u64)n / BUCKET_SLOTS;
	struct bucket *b = bpf_map_lookup_elem(keys, &bi);
	if (!b)
		return;
	asm volatile("" ::: "memory"); // the value's stores first (x86 keeps their order)
	b->key[n & (BUCKET_SLOTS - 1)] = key;
}

// total_of returns the totals of stack in process pidx, adding them to the
// table the first time. Two threads adding the same at once take two
// slots, which user space sums. Another stack with the same key (a 2^-63
// chance) is a map full.
static __always_inline struct total_val *total_of(__u32 pidx, __u64 stack)
{
	__u64 key = fmix64(stack ^ ((__u64)pidx << 48) ^ 0x9E3779B97F4A7C15ULL) & ~KEY_BUSY;
	if (!key)
		key = 1;
	struct total_val *tv;
	long n = totals_find(key);
	if (n >= 0) {
		__u32 i = n;
		tv = bpf_map_lookup_elem(&totals_vals, &i);
		if (!tv || tv->pidx != pidx || tv->stack != stack)
			return 0;
		return tv;
	}
	n = totals_claim(key);
	if (n < 0)
		return 0;
	__u32 i = n;
	tv = bpf_map_lookup_elem(&totals_vals, &i);
	if (!tv) {
		set_key(&totals_keys, n, 0);
		return 0;
	}
	tv->allocs = 0;
	tv->alloc_bytes = 0;
	tv->stack = stack;
	tv->pidx = pidx;
	set_key(&totals_keys, n, key);
	return tv;
}
