/*
 * boot.h: the bootstrap arena that serves dlsym before the real functions are
 * known, and resolve_reals.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_BOOT_H
#define HEAPSCOPE_BOOT_H


/*
 * A bootstrap arena for the allocations dlsym makes before the real
 * functions are known. Its blocks are never freed or traced.
 */
static char boot_arena[64 * 1024] __attribute__((aligned(64)));
static size_t boot_used;
static int boot_lock;

static int is_boot(const void *p)
{
	return (const char *)p >= boot_arena && (const char *)p < boot_arena + sizeof boot_arena;
}

static void *boot_alloc(size_t n, size_t align)
{
	if (align < 16)
		align = 16;
	while (__atomic_exchange_n(&boot_lock, 1, __ATOMIC_ACQUIRE))
		_mm_pause();
	size_t off = (boot_used + 16 + align - 1) & ~(align - 1);
	void *p = NULL;
	if (n <= sizeof boot_arena && off <= sizeof boot_arena - n) {
		p = boot_arena + off;
		((size_t *)p)[-1] = n;
		boot_used = off + n;
	}
	__atomic_store_n(&boot_lock, 0, __ATOMIC_RELEASE);
	return p;
}

/*
 * Loaded into a running process by heapscope attach --inject (dlopen, not
 * LD_PRELOAD): set by the constructor, before anything is resolved. The
 * real functions are then the program's, the definitions its own modules
 * are bound to (the first in the global scope), not the next after us: we
 * are in no scope but our own.
 */
static int g_injected;
static inline void *hs_next(void) { return g_injected ? RTLD_DEFAULT : RTLD_NEXT; }

static int reals_state; /* 0: unresolved, 1: resolving, 2: resolved */
static inline void ensure_reals(void);

static void resolve_reals(void)
{
	int expect = 0;
	if (__atomic_compare_exchange_n(&reals_state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		tls.resolving = 1;
		/* free first: dlsym may free what it allocated while resolving the rest. */
		real.free = dlsym(hs_next(), "free");
		real.malloc = dlsym(hs_next(), "malloc");
		real.calloc = dlsym(hs_next(), "calloc");
		real.realloc = dlsym(hs_next(), "realloc");
		real.reallocarray = dlsym(hs_next(), "reallocarray");
		real.posix_memalign = dlsym(hs_next(), "posix_memalign");
		real.aligned_alloc = dlsym(hs_next(), "aligned_alloc");
		real.memalign = dlsym(hs_next(), "memalign");
		real.valloc = dlsym(hs_next(), "valloc");
		real.pvalloc = dlsym(hs_next(), "pvalloc");
		real.mmap = dlsym(hs_next(), "mmap");
		real.mmap64 = dlsym(hs_next(), "mmap64");
		real.munmap = dlsym(hs_next(), "munmap");
		real.mremap = dlsym(hs_next(), "mremap");
		real.dlclose = dlsym(hs_next(), "dlclose");
		real.dlopen = dlsym(hs_next(), "dlopen");
		real.dl_iterate_phdr = dlsym(hs_next(), "dl_iterate_phdr");
		real.malloc_usable_size = dlsym(hs_next(), "malloc_usable_size");
		real.execve = dlsym(hs_next(), "execve");
		real.execv = dlsym(hs_next(), "execv");
		real.execvp = dlsym(hs_next(), "execvp");
		real.execvpe = dlsym(hs_next(), "execvpe");
		real.posix_spawn = dlsym(hs_next(), "posix_spawn");
		real.posix_spawnp = dlsym(hs_next(), "posix_spawnp");
		tls.resolving = 0;
		__atomic_store_n(&reals_state, 2, __ATOMIC_RELEASE);
		return;
	}
	if (tls.resolving)
		return; /* dlsym calling back into us: the caller uses the arena */
	while (__atomic_load_n(&reals_state, __ATOMIC_ACQUIRE) != 2)
		sched_yield();
}

/* The C library's dl_iterate_phdr, for our own walks of the loaded
 * objects (the exported one is the program's, in hooks.h). */
static int iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *arg)
{
	ensure_reals();
	return real.dl_iterate_phdr ? real.dl_iterate_phdr(cb, arg) : 0;
}

/*
 * The allocator the real malloc belongs to (HS_HEAP_*), for HELLO: the file
 * that defines it, named as the eBPF provider names allocator files
 * (internal/ebpf: libjemalloc.so*, libtcmalloc*, libmimalloc*). A file of
 * another name that is not the C library is told by a function only one
 * allocator defines (internal/ebpf/sites' marks); anything else is the C
 * library's. Worked out once per image (the real malloc does not change),
 * with in_hook set: dlsym may allocate.
 */
static uint32_t malloc_heap(void)
{
	static int known;
	static uint32_t heap;
	if (known)
		return heap;
	known = 1;
	heap = HS_HEAP_LIBC;
	Dl_info mi;
	if (!real.malloc || !dladdr((void *)real.malloc, &mi) || !mi.dli_fname)
		return heap;
	const char *base = strrchr(mi.dli_fname, '/');
	base = base ? base + 1 : mi.dli_fname;
	static const struct {
		const char *file, *mark;
		uint32_t heap;
	} allocs[] = {
		{"libjemalloc.so", "mallocx", HS_HEAP_JEMALLOC},
		{"libjemalloc.so", "je_mallocx", HS_HEAP_JEMALLOC},
		{"libtcmalloc", "tc_malloc", HS_HEAP_TCMALLOC},
		{"libmimalloc", "mi_malloc", HS_HEAP_MIMALLOC},
	};
	for (size_t i = 0; i < sizeof allocs / sizeof allocs[0]; i++)
		if (!strncmp(base, allocs[i].file, strlen(allocs[i].file)))
			return heap = allocs[i].heap;
	if (!strncmp(base, "libc.so", 7) || !strncmp(base, "libc-", 5))
		return heap;
	for (size_t i = 0; i < sizeof allocs / sizeof allocs[0]; i++) {
		Dl_info si;
		void *s = dlsym(hs_next(), allocs[i].mark);
		if (s && dladdr(s, &si) && si.dli_fbase == mi.dli_fbase)
			return heap = allocs[i].heap;
	}
	dlerror(); /* the failed lookups are ours, not the program's */
	return heap;
}

#endif
