/*
 * hooks.h: the exported entry points: the malloc family, the aligned family,
 * mmap/munmap/mremap, dlopen/dlclose and the C++ operators new and delete.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_HOOKS_H
#define HEAPSCOPE_HOOKS_H

static inline void ensure_reals(void)
{
	if (HS_UNLIKELY(__atomic_load_n(&reals_state, __ATOMIC_ACQUIRE) != 2))
		resolve_reals();
}

/* run a real function with nested allocations untraced */
#define UNTRACED(expr)                                                                                                 \
	({                                                                                                             \
		uint32_t _saved = tls.in_hook;                                                                         \
		tls.in_hook = HOOK_REAL;                                                                               \
		__typeof__(expr) _r = (expr);                                                                          \
		tls.in_hook = _saved;                                                                                  \
		_r;                                                                                                    \
	})

/* An allocation for our bookkeeping (HOOK_LIB), from our own heap. */
static HS_NOINLINE void *lib_alloc(size_t n, size_t align)
{
	void *p = own_alloc(n, align);
	if (!p)
		errno = ENOMEM;
	return p;
}

#define IN_LIB_CALL() HS_UNLIKELY(tls.in_hook == HOOK_LIB)

/*
 * libunwind's first walk on a thread allocates its thread-local data with
 * the C library's malloc. In an injected process the loader's malloc is
 * libc's, not ours, so the block is the program's, for good: taken from
 * inside a wrapper, after the real call, it lands just above the block the
 * program was given and stays there after the session, between that
 * block's place and the top of the thread's arena, so that every later
 * allocation of that size misses the top (an 8-thread loop paid about 15%
 * per pair after the sessions). g_unw_prewarm (set by an injected session
 * that may walk with libunwind) makes that first walk before the real
 * call, where the block lands below what the call then takes.
 */
static int g_unw_prewarm;

static HS_NOINLINE void unw_prewarm(uint32_t fam)
{
	struct hs_tls *t = &tls;
	if (t->unw_warm || t->in_hook || t->in_phdr || !TRACED(fam) || !__atomic_load_n(&p_unw_backtrace, __ATOMIC_ACQUIRE))
		return;
	void *buf[2];
	IN_LIB(p_unw_backtrace(buf, 1));
	t->unw_warm = 1;
}

#define UNW_PREWARM(fam)                                                                                               \
	do {                                                                                                           \
		if (HS_UNLIKELY(__atomic_load_n(&g_unw_prewarm, __ATOMIC_RELAXED)) && !tls.unw_warm)                   \
			unw_prewarm(fam);                                                                              \
	} while (0)

HS_EXPORT void *malloc(size_t n)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	if (HS_UNLIKELY(!real.malloc))
		return boot_alloc(n, 16);
	if (IN_LIB_CALL())
		return lib_alloc(n, 16);
	UNW_PREWARM(HS_FAM_MALLOC);
	void *p = real.malloc(n);
	rec_alloc(HS_FUNC_MALLOC, HS_FAM_MALLOC, p, n, fp);
	return p;
}

HS_EXPORT void *calloc(size_t n, size_t size)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	size_t total;
	if (__builtin_mul_overflow(n, size, &total))
		total = SIZE_MAX;
	if (HS_UNLIKELY(!real.calloc))
		return total == SIZE_MAX ? NULL : boot_alloc(total, 16); /* the arena is zeroed and never reused */
	if (IN_LIB_CALL()) {
		if (total == SIZE_MAX) {
			errno = ENOMEM;
			return NULL;
		}
		void *q = lib_alloc(total, 16);
		if (q)
			memset(q, 0, total); /* a reused block is not */
		return q;
	}
	UNW_PREWARM(HS_FAM_CALLOC);
	void *p = real.calloc(n, size);
	rec_alloc(HS_FUNC_CALLOC, HS_FAM_CALLOC, p, total, fp);
	return p;
}

HS_EXPORT void free(void *p)
{
	uintptr_t fp = HS_FRAME();
	if (!p || is_boot(p))
		return;
	if (HS_UNLIKELY(is_own(p))) {
		own_free(p); /* a block of ours: never shown, nor its free */
		return;
	}
	ensure_reals();
	/* recorded before the block is released, so that whoever gets it next
	 * is stamped later */
	if (TRACED(HS_FAM_FREE) && sample_free(p))
		record(HS_FUNC_FREE, HS_FAM_FREE, HS_KIND_FREE, 1, (uint64_t)(uintptr_t)p, 0, 0, 0, fp);
	if (HS_LIKELY(real.free != NULL))
		real.free(p);
}

/* Record realloc(old, n) = q as sample_realloc_end said (SMP_REC_*). */
static HS_INLINE void rec_realloc(uint32_t func, int what, void *old, void *q, size_t n, uintptr_t fp)
{
	if (HS_LIKELY(what == SMP_REC_REALLOC))
		record(func, HS_FAM_REALLOC, HS_KIND_REALLOC, 3, (uint64_t)(uintptr_t)q, n, (uint64_t)(uintptr_t)old, 0, fp);
	else if (what == SMP_REC_FREE)
		record(HS_FUNC_FREE, HS_FAM_REALLOC, HS_KIND_FREE, 1, (uint64_t)(uintptr_t)old, 0, 0, 0, fp);
}

/*
 * realloc(p, n) in our bookkeeping (HOOK_LIB), or of a block of ours: the
 * result is ours. A block of the program's heap that the C library grows
 * for us (a thread's TLS vector, when libunwind's TLS is first used) moves
 * into our heap, so that what it gains there is not the program's.
 */
static HS_NOINLINE void *lib_realloc(void *p, size_t n)
{
	if (!p || is_own(p)) {
		void *q = own_realloc(p, n);
		if (!q && n)
			errno = ENOMEM;
		return q;
	}
	if (!real.malloc_usable_size)
		return real.realloc(p, n);
	size_t have = real.malloc_usable_size(p);
	void *q = lib_alloc(n, 16);
	if (q) {
		memcpy(q, p, have < n ? have : n);
		real.free(p);
	}
	return q;
}

static void *boot_realloc(void *p, size_t n)
{
	size_t old = ((size_t *)p)[-1];
	void *q = real.malloc ? real.malloc(n) : boot_alloc(n, 16);
	if (q)
		memcpy(q, p, old < n ? old : n);
	return q;
}

HS_EXPORT void *realloc(void *p, size_t n)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	if (HS_UNLIKELY(is_boot(p) || !real.realloc))
		return p ? boot_realloc(p, n) : malloc(n);
	if (HS_UNLIKELY(IN_LIB_CALL() || is_own(p)))
		return lib_realloc(p, n);
	int smp = sample_realloc_begin(p);
	UNW_PREWARM(HS_FAM_REALLOC);
	void *q = real.realloc(p, n);
	if (TRACED(HS_FAM_REALLOC)) {
		int what = sample_realloc_end(smp, &p, q, n); /* may set p to NULL: before p is read */
		rec_realloc(HS_FUNC_REALLOC, what, p, q, n, fp);
	}
	return q;
}

HS_EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	size_t total;
	if (__builtin_mul_overflow(n, size, &total))
		total = SIZE_MAX;
	if (HS_UNLIKELY(is_boot(p) || !real.reallocarray)) {
		if (total == SIZE_MAX) {
			errno = ENOMEM;
			return NULL;
		}
		return p ? boot_realloc(p, total) : malloc(total);
	}
	if (HS_UNLIKELY(IN_LIB_CALL() || is_own(p))) {
		if (total == SIZE_MAX) {
			errno = ENOMEM;
			return NULL;
		}
		return lib_realloc(p, total);
	}
	/* glibc's reallocarray calls realloc: that one is not the program's call */
	int smp = sample_realloc_begin(p);
	UNW_PREWARM(HS_FAM_REALLOC);
	void *q = UNTRACED(real.reallocarray(p, n, size));
	if (TRACED(HS_FAM_REALLOC)) {
		int what = sample_realloc_end(smp, &p, q, total); /* may set p to NULL: before p is read */
		rec_realloc(HS_FUNC_REALLOCARRAY, what, p, q, total, fp);
	}
	return q;
}

HS_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	if (HS_UNLIKELY(!real.posix_memalign) || IN_LIB_CALL()) {
		if (align < sizeof(void *) || (align & (align - 1)))
			return EINVAL;
		void *p = real.posix_memalign ? own_alloc(n, align) : boot_alloc(n, align);
		if (!p)
			return ENOMEM;
		*out = p;
		return 0;
	}
	UNW_PREWARM(HS_FAM_ALIGNED);
	int r = UNTRACED(real.posix_memalign(out, align, n));
	rec_alloc(HS_FUNC_POSIX_MEMALIGN, HS_FAM_ALIGNED, r == 0 ? *out : NULL, n, fp);
	return r;
}

#define ALIGNED_WRAPPER(name, FUNC, params, args, bootexpr, libexpr)                                                   \
	HS_EXPORT void *name params                                                                                    \
	{                                                                                                              \
		uintptr_t fp = HS_FRAME();                                                                             \
		ensure_reals();                                                                                        \
		if (HS_UNLIKELY(!real.name))                                                                           \
			return bootexpr;                                                                               \
		if (IN_LIB_CALL())                                                                                     \
			return libexpr;                                                                                \
		UNW_PREWARM(HS_FAM_ALIGNED);                                                                           \
		void *p = UNTRACED(real.name args);                                                                    \
		rec_alloc(FUNC, HS_FAM_ALIGNED, p, n, fp);                                                             \
		return p;                                                                                              \
	}

/* memalign's alignment for our heap: a power of two, at least 16 */
static size_t lib_align(size_t a)
{
	size_t r = 16;
	while (r < a && r < ((size_t)1 << 28))
		r <<= 1;
	return r;
}

ALIGNED_WRAPPER(aligned_alloc, HS_FUNC_ALIGNED_ALLOC, (size_t align, size_t n), (align, n), boot_alloc(n, align),
                lib_alloc(n, lib_align(align)))
ALIGNED_WRAPPER(memalign, HS_FUNC_MEMALIGN, (size_t align, size_t n), (align, n), boot_alloc(n, align),
                lib_alloc(n, lib_align(align)))
ALIGNED_WRAPPER(valloc, HS_FUNC_VALLOC, (size_t n), (n), boot_alloc(n, 4096), lib_alloc(n, 4096))
ALIGNED_WRAPPER(pvalloc, HS_FUNC_PVALLOC, (size_t n), (n), boot_alloc(n, 4096), lib_alloc((n + 4095) & ~(size_t)4095, 4096))

/* The mmap family: anonymous mappings only, and only when asked for. */
static void *do_mmap(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr, size_t len, int prot, int flags,
                     int fd, off_t off, uintptr_t fp)
{
	void *r = fn ? fn(addr, len, prot, flags, fd, off) : (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
	if (r != MAP_FAILED && (flags & MAP_ANONYMOUS) && TRACED(HS_FAM_MMAP))
		record(HS_FUNC_MMAP, HS_FAM_MMAP, HS_KIND_MMAP, 2, (uint64_t)(uintptr_t)r, len, 0, 0, fp);
	return r;
}

HS_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	return do_mmap(real.mmap, addr, len, prot, flags, fd, off, fp);
}

HS_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	return do_mmap(real.mmap64, addr, len, prot, flags, fd, off, fp);
}

HS_EXPORT int munmap(void *addr, size_t len)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	if (TRACED(HS_FAM_MMAP))
		record(HS_FUNC_MUNMAP, HS_FAM_MMAP, HS_KIND_MUNMAP, 2, (uint64_t)(uintptr_t)addr, len, 0, 0, fp);
	return real.munmap ? real.munmap(addr, len) : (int)syscall(SYS_munmap, addr, len);
}

HS_EXPORT void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
	uintptr_t fp = HS_FRAME();
	void *want = NULL;
	if (flags & MREMAP_FIXED) {
		__builtin_va_list ap;
		__builtin_va_start(ap, flags);
		want = __builtin_va_arg(ap, void *);
		__builtin_va_end(ap);
	}
	ensure_reals();
	void *r = real.mremap ? real.mremap(old, old_len, len, flags, want)
	                      : (void *)syscall(SYS_mremap, old, old_len, len, flags, want);
	if (TRACED(HS_FAM_MMAP))
		record(HS_FUNC_MREMAP, HS_FAM_MMAP, HS_KIND_REALLOC, 4, r == MAP_FAILED ? 0 : (uint64_t)(uintptr_t)r, len,
		       (uint64_t)(uintptr_t)old, old_len, fp);
	return r;
}

HS_EXPORT int dlclose(void *h)
{
	ensure_reals();
	int r = real.dlclose(h);
	if (r == 0) {
		__atomic_add_fetch(&g_dl_epoch, 1, __ATOMIC_RELEASE);
		if (g_injected)
			inj_kick(); /* the watcher forgets its entries */
	}
	return r;
}

/*
 * The program's dl_iterate_phdr. Its callbacks run with the loader's lock
 * held, and some allocate (Rust's backtrace lists the loaded objects so).
 * libunwind takes a lock of its own and then the loader's, so a walk by
 * libunwind from such a callback could wait for ever on a thread that
 * holds libunwind's lock and waits for the loader's: calls made inside are
 * walked without libunwind (tables, else frame pointers). The count is
 * dropped on the way out however the callback leaves (an exception too).
 */
static void phdr_leave(uint32_t *unused)
{
	(void)unused;
	tls.in_phdr--;
}

HS_EXPORT int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *arg)
{
	ensure_reals();
	if (HS_UNLIKELY(!real.dl_iterate_phdr))
		return 0;
	tls.in_phdr++;
	uint32_t guard __attribute__((cleanup(phdr_leave))) = 1;
	return real.dl_iterate_phdr(cb, arg);
}

/*
 * RTLD_DEEPBIND makes a library bind malloc and free to the C library's
 * before ours: its calls would be missed, and blocks the C library
 * allocated for it (strdup) that it frees would show as leaks. The flag is
 * dropped, as heaptrack does, and said once. The real dlopen is reached by
 * a tail call, so that it sees the program as its caller (for the caller's
 * RUNPATH and namespace), not this library.
 */
static HS_NOINLINE void deepbind_note(void)
{
	static uint32_t said_gen; /* once per image: a forked child has a stream of its own */
	if (__atomic_exchange_n(&said_gen, g_gen, __ATOMIC_RELAXED) == g_gen)
		return;
	send_note(HS_NOTE_DEEPBIND, NULL, 0);
}

HS_EXPORT void *dlopen(const char *file, int flags)
{
	ensure_reals();
	if (HS_UNLIKELY(flags & RTLD_DEEPBIND) && g_mode != MODE_OFF) {
		flags &= ~RTLD_DEEPBIND;
		deepbind_note();
	}
	if (g_injected)
		inj_kick(); /* the watcher redirects the new modules' entries once they are relocated */
	return real.dlopen(file, flags);
}

/*
 * C++ operator new and delete. The real operators (libstdc++'s) call malloc
 * and free: the operator is recorded, as what the program called, and the
 * first allocation call it makes (its own malloc or free) is not; later ones
 * (a new_handler's, the exception a failing new throws) are the program's
 * and are recorded. An operator called from inside another (new[] calls
 * new) passes through. A new that throws is recorded as a failed
 * allocation. Every variant takes at most three integer-class arguments;
 * passing three is harmless.
 */
typedef uintptr_t (*cxx_fn)(uintptr_t, uintptr_t, uintptr_t);

static cxx_fn cxx_real(cxx_fn *slot, const char *name)
{
	cxx_fn f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!f) {
		IN_LIB(f = (cxx_fn)dlsym(hs_next(), name));
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

/* Runs when a wrapped operator returns or an exception leaves it. */
struct cxx_call {
	int done;
	uint32_t func;
	uintptr_t size, fp;
};

static void cxx_end(struct cxx_call *c)
{
	tls.swallow = 0;
	if (!c->done) /* unwinding: the allocation failed */
		rec_alloc(c->func, HS_FAM_CXX, NULL, c->size, c->fp);
}

/* The start of every operator: its frame, and the real operator (abort
 * when there is none: the program called an operator its C++ library
 * lacks). */
#define CXX_PROLOGUE(sym)                                                                                              \
	uintptr_t fp = HS_FRAME();                                                                                     \
	ensure_reals();                                                                                                \
	cxx_fn f = cxx_real(&cxx_fn_##sym, #sym);                                                                      \
	if (!f)                                                                                                        \
		abort()

/* The real operator sym: found at its first call (an injected library's
 * are set by got.h before any call can come). */
#define CXX_NEW(sym, FUNC)                                                                                             \
	static cxx_fn cxx_fn_##sym;                                                                                    \
	HS_EXPORT uintptr_t sym(uintptr_t a, uintptr_t b, uintptr_t c)                                                 \
	{                                                                                                              \
		CXX_PROLOGUE(sym);                                                                                     \
		if (!TRACED(HS_FAM_CXX) || tls.in_hook || tls.swallow)                                                 \
			return f(a, b, c);                                                                             \
		UNW_PREWARM(HS_FAM_CXX);                                                                               \
		struct cxx_call call __attribute__((cleanup(cxx_end))) = {0, FUNC, a, fp};                             \
		tls.swallow = 1;                                                                                       \
		uintptr_t p = f(a, b, c);                                                                              \
		tls.swallow = 0;                                                                                       \
		call.done = 1;                                                                                         \
		rec_alloc(FUNC, HS_FAM_CXX, (void *)p, a, fp);                                                         \
		return p;                                                                                              \
	}

#define CXX_DELETE(sym, FUNC)                                                                                          \
	static cxx_fn cxx_fn_##sym;                                                                                    \
	HS_EXPORT void sym(uintptr_t a, uintptr_t b, uintptr_t c)                                                      \
	{                                                                                                              \
		CXX_PROLOGUE(sym);                                                                                     \
		if (!a || !TRACED(HS_FAM_CXX) || tls.in_hook || tls.swallow) {                                         \
			f(a, b, c);                                                                                    \
			return;                                                                                        \
		}                                                                                                      \
		if (sample_free((void *)a))                                                                            \
			record(FUNC, HS_FAM_CXX, HS_KIND_FREE, 1, a, 0, 0, 0, fp);                                     \
		struct cxx_call call __attribute__((cleanup(cxx_end))) = {1, FUNC, 0, fp};                             \
		tls.swallow = 1;                                                                                       \
		f(a, b, c);                                                                                            \
	}

CXX_NEW(_Znwm, HS_FUNC_NEW)
CXX_NEW(_Znam, HS_FUNC_NEW_ARRAY)
CXX_NEW(_ZnwmRKSt9nothrow_t, HS_FUNC_NEW)
CXX_NEW(_ZnamRKSt9nothrow_t, HS_FUNC_NEW_ARRAY)
CXX_NEW(_ZnwmSt11align_val_t, HS_FUNC_NEW)
CXX_NEW(_ZnamSt11align_val_t, HS_FUNC_NEW_ARRAY)
CXX_NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, HS_FUNC_NEW)
CXX_NEW(_ZnamSt11align_val_tRKSt9nothrow_t, HS_FUNC_NEW_ARRAY)
CXX_DELETE(_ZdlPv, HS_FUNC_DELETE)
CXX_DELETE(_ZdaPv, HS_FUNC_DELETE_ARRAY)
CXX_DELETE(_ZdlPvm, HS_FUNC_DELETE)
CXX_DELETE(_ZdaPvm, HS_FUNC_DELETE_ARRAY)
CXX_DELETE(_ZdlPvRKSt9nothrow_t, HS_FUNC_DELETE)
CXX_DELETE(_ZdaPvRKSt9nothrow_t, HS_FUNC_DELETE_ARRAY)
CXX_DELETE(_ZdlPvSt11align_val_t, HS_FUNC_DELETE)
CXX_DELETE(_ZdaPvSt11align_val_t, HS_FUNC_DELETE_ARRAY)
CXX_DELETE(_ZdlPvmSt11align_val_t, HS_FUNC_DELETE)
CXX_DELETE(_ZdaPvmSt11align_val_t, HS_FUNC_DELETE_ARRAY)
CXX_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, HS_FUNC_DELETE)
CXX_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, HS_FUNC_DELETE_ARRAY)

#endif
