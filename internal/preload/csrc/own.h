/*
 * own.h: the interposer's own heap. What the C library allocates for our
 * bookkeeping (calls made in HOOK_LIB: the dynamic loader's records of
 * libunwind, libunwind's thread data, dlsym's and realpath's buffers) comes
 * from here, never from the program's malloc, so that the program's heap
 * (its arenas' growth, mallinfo2, malloc_stats, where its blocks land) is
 * what it is untraced. Those blocks are never recorded, nor their frees,
 * whenever the C library makes them (libunwind's thread data is freed at
 * each thread's exit, outside any hook): a free tells them by their
 * address.
 *
 * One reservation of address space (PROT_NONE, so that it counts against
 * no commit limit), made read-write a megabyte at a time as it is used;
 * blocks of power-of-two classes from 16 bytes, each after a 16-byte
 * header that names its class (and, for an aligned block, where its
 * allocation starts), reused through a free list per class, never given
 * back. One lock, held only over a list or the bump pointer, never while
 * calling anything; the fork handlers take it.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_OWN_H
#define HEAPSCOPE_OWN_H

#define OWN_RESERVE (1ull << 30)
#define OWN_COMMIT (1ull << 20)
#define OWN_MIN_SHIFT 4
#define OWN_CLASSES 27 /* 16 B to 1 GiB */
#define OWN_MAGIC 0x6f776e48u

struct own_hdr {
	uint32_t magic;
	uint32_t cls;
	uint64_t start; /* where the class block starts (an aligned block's header is inside it) */
};

static uintptr_t g_own;        /* the reservation; 0 until the first block */
static uint64_t g_own_used;    /* bytes handed out from its start */
static uint64_t g_own_committed;
static void *g_own_free[OWN_CLASSES];
static uint32_t g_own_lock;

static void own_lock(void)
{
	while (__atomic_exchange_n(&g_own_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void own_unlock(void) { __atomic_store_n(&g_own_lock, 0, __ATOMIC_RELEASE); }

/* Whether p is one of our blocks. */
static HS_INLINE int is_own(const void *p)
{
	uintptr_t b = __atomic_load_n(&g_own, __ATOMIC_RELAXED);
	return b != 0 && (uintptr_t)p - b < OWN_RESERVE;
}

/* A class block of class c, or NULL. Lock held. */
static void *own_carve(uint32_t c)
{
	if (!g_own) {
		void *m = sys_mmap(NULL, OWN_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		__atomic_store_n(&g_own, (uintptr_t)m, __ATOMIC_RELEASE);
	}
	uint64_t size = 1ull << (c + OWN_MIN_SHIFT), a = size < 4096 ? size : 4096;
	uint64_t off = (g_own_used + a - 1) & ~(a - 1);
	if (off + size > OWN_RESERVE)
		return NULL;
	if (off + size > g_own_committed) {
		uint64_t to = (off + size + OWN_COMMIT - 1) & ~(OWN_COMMIT - 1);
		if (syscall(SYS_mprotect, g_own + g_own_committed, to - g_own_committed, PROT_READ | PROT_WRITE) != 0)
			return NULL;
		g_own_committed = to;
	}
	g_own_used = off + size;
	return (void *)(g_own + off);
}

/* n bytes aligned to align (a power of two, at least 16), or NULL. */
static void *own_alloc(size_t n, size_t align)
{
	if (n > OWN_RESERVE / 2 || align > OWN_RESERVE / 4)
		return NULL;
	uint64_t need = n + sizeof(struct own_hdr) + (align > 16 ? align : 0);
	uint32_t c = 0;
	while ((1ull << (c + OWN_MIN_SHIFT)) < need)
		c++;
	if (c >= OWN_CLASSES)
		return NULL;
	int saved = errno;
	own_lock();
	void *b = g_own_free[c];
	if (b)
		g_own_free[c] = *(void **)b;
	else
		b = own_carve(c);
	own_unlock();
	errno = saved;
	if (!b)
		return NULL;
	uintptr_t p = (uintptr_t)b + sizeof(struct own_hdr);
	if (align > 16)
		p = (p + align - 1) & ~(uintptr_t)(align - 1);
	struct own_hdr *h = (struct own_hdr *)p - 1;
	*h = (struct own_hdr){OWN_MAGIC, c, (uint64_t)(uintptr_t)b};
	return (void *)p;
}

/* The usable bytes of our block p. */
static size_t own_size(const void *p)
{
	const struct own_hdr *h = (const struct own_hdr *)p - 1;
	return (size_t)(h->start + (1ull << (h->cls + OWN_MIN_SHIFT)) - (uintptr_t)p);
}

static void own_free(void *p)
{
	struct own_hdr *h = (struct own_hdr *)p - 1;
	if (h->magic != OWN_MAGIC || h->cls >= OWN_CLASSES)
		return; /* not a block we handed out: leave it */
	uint32_t c = h->cls;
	void *b = (void *)(uintptr_t)h->start;
	h->magic = 0;
	own_lock();
	*(void **)b = g_own_free[c];
	g_own_free[c] = b;
	own_unlock();
}

static void *own_realloc(void *p, size_t n)
{
	if (!p)
		return own_alloc(n, 16);
	size_t have = own_size(p);
	if (n <= have && n > have / 4)
		return p;
	void *q = own_alloc(n, 16);
	if (q) {
		memcpy(q, p, have < n ? have : n);
		own_free(p);
	}
	return q;
}

#endif
