/*
 * got.h: heapscope attach --inject's redirection. Loaded into a running
 * process, the library is nobody's definition of malloc: the program's
 * modules were bound to the C library's long ago. So, as memray and
 * heaptrack do, the GOT entries that name an allocation function in every
 * module of the process's namespace are pointed at our wrappers while a
 * session runs, and back at what they held when it ends.
 *
 * An entry is redirected only if it holds the function's definition in the
 * global scope (what the wrapper forwards to: the program's own allocator,
 * whichever it is) or, for a lazily bound PLT entry, its module's own PLT
 * stub: an entry bound elsewhere (a library loaded with RTLD_DEEPBIND, a
 * copy of the C library in another namespace) keeps its binding, so that
 * no block is ever freed by another allocator than the one that made it.
 * Every write is made holding the loader's list lock (inside
 * dl_iterate_phdr's callback), so that no module can be unloaded under it;
 * entries in a RELRO segment are made writable for the write and read-only
 * again after. A module that another thread is loading at that moment (its
 * entries not yet relocated) is looked at again later.
 *
 * What redirects and restores runs outside every hook, in heapscope's
 * injected calls (inject.h) and the watcher thread, holding g_got_lock and
 * no lock of the program's: never from an allocation call.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_GOT_H
#define HEAPSCOPE_GOT_H

extern ElfW(Dyn) _DYNAMIC[]; /* ours: our own entries are never redirected */

/* The functions redirected: their names, our wrappers, and (filled before
 * each scan) their definitions in the global scope. */
struct got_hook {
	const char *name;
	void *fn;     /* our wrapper */
	void **real;  /* where the wrapper finds the function it forwards to */
	uint32_t hash;
	uintptr_t def; /* the definition the program's modules are bound to; 0: none known */
	/* learnt from the modules before each scan (got_learn_cb) */
	uintptr_t bound; /* what a bound PLT entry holds */
	uintptr_t canon; /* the executable's PLT stub, when it takes the function's address */
};

/* Filled by got_hooks_init (after hooks.h's wrappers). */
static struct got_hook g_hooks[48];
static size_t g_nhooks;

static uint32_t got_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

struct got_patch {
	uintptr_t slot, orig, repl;
	uintptr_t mod, dyn; /* the module: its load bias and dynamic section */
};
struct got_seen {
	uintptr_t mod, dyn;
};

static pthread_mutex_t g_got_lock = PTHREAD_MUTEX_INITIALIZER;
static struct got_patch *g_patches;
static size_t g_npatches, g_patches_cap;
static struct got_seen *g_seen; /* modules looked at, relocated */
static size_t g_nseen, g_seen_cap;
static unsigned long long g_got_adds = ~0ull, g_got_subs = ~0ull; /* the loader's counters at the last scan */
static uint32_t g_got_pending; /* modules seen before their relocation: look again soon */
static uint32_t g_got_live;    /* entries redirected now */

static int got_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 1;
	size_t c = *cap ? *cap * 2 : 256;
	while (c < need)
		c *= 2;
	void *n = *arr ? sys_mremap(*arr, *cap * elem, c * elem, MREMAP_MAYMOVE)
	               : sys_mmap(NULL, c * elem, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (n == MAP_FAILED)
		return 0;
	*arr = n;
	*cap = c;
	return 1;
}

/* Write v at slot, which lies in [relro_lo, relro_hi) or in a writable
 * page. Returns 0 if it could not be written. */
static int got_write(uintptr_t slot, uintptr_t v, uintptr_t relro_lo, uintptr_t relro_hi)
{
	if (slot & 7)
		return 0;
	if (slot >= relro_lo && slot < relro_hi) {
		uintptr_t page = slot & ~(uintptr_t)4095;
		if (syscall(SYS_mprotect, page, 4096, PROT_READ | PROT_WRITE) != 0)
			return 0;
		__atomic_store_n((uintptr_t *)slot, v, __ATOMIC_RELEASE);
		syscall(SYS_mprotect, page, 4096, PROT_READ);
		return 1;
	}
	/* Outside RELRO the page is the module's writable data; written by
	 * the kernel on our behalf, so that a page that is not (a program
	 * that protected its own GOT) fails the write instead of faulting. */
	struct iovec local = {&v, sizeof v}, remote = {(void *)slot, sizeof v};
	long r = syscall(SYS_process_vm_writev, (pid_t)syscall(SYS_getpid), &local, 1, &remote, 1, 0);
	if (r == (long)sizeof v)
		return 1;
	if (r < 0 && (errno == ENOSYS || errno == EPERM)) {
		__atomic_store_n((uintptr_t *)slot, v, __ATOMIC_RELEASE);
		return 1;
	}
	return 0;
}

/* What a module's dynamic section says about its relocations. */
struct got_dyn {
	const ElfW(Sym) *symtab;
	const char *strtab;
	size_t strsz;
	const ElfW(Rela) *rela, *jmprel;
	size_t relasz, jmprelsz;
	uintptr_t lo, hi;             /* its loaded segments */
	uintptr_t relro_lo, relro_hi; /* made read-only after relocation */
};

static uintptr_t dyn_ptr(uintptr_t bias, uintptr_t v)
{
	/* the loader relocates these entries in place, except in read-only
	 * dynamic sections (the vDSO's) */
	return bias && v < bias ? v + bias : v;
}

static int got_parse(const struct dl_phdr_info *info, struct got_dyn *d)
{
	memset(d, 0, sizeof *d);
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t bias = info->dlpi_addr;
	d->lo = UINTPTR_MAX;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(bias + p->p_vaddr);
		else if (p->p_type == PT_LOAD) {
			if (bias + p->p_vaddr < d->lo)
				d->lo = bias + p->p_vaddr;
			if (bias + p->p_vaddr + p->p_memsz > d->hi)
				d->hi = bias + p->p_vaddr + p->p_memsz;
		} else if (p->p_type == PT_GNU_RELRO) {
			/* as the loader protects it: whole pages only */
			d->relro_lo = (bias + p->p_vaddr) & ~(uintptr_t)4095;
			d->relro_hi = (bias + p->p_vaddr + p->p_memsz) & ~(uintptr_t)4095;
		}
	}
	if (!dyn || dyn == _DYNAMIC)
		return 0;
	size_t relaent = sizeof(ElfW(Rela)), pltrel = DT_RELA, syment = sizeof(ElfW(Sym));
	for (const ElfW(Dyn) *e = dyn; e->d_tag != DT_NULL; e++) {
		switch (e->d_tag) {
		case DT_SYMTAB:
			d->symtab = (const ElfW(Sym) *)dyn_ptr(bias, e->d_un.d_ptr);
			break;
		case DT_STRTAB:
			d->strtab = (const char *)dyn_ptr(bias, e->d_un.d_ptr);
			break;
		case DT_STRSZ:
			d->strsz = e->d_un.d_val;
			break;
		case DT_RELA:
			d->rela = (const ElfW(Rela) *)dyn_ptr(bias, e->d_un.d_ptr);
			break;
		case DT_RELASZ:
			d->relasz = e->d_un.d_val;
			break;
		case DT_RELAENT:
			relaent = e->d_un.d_val;
			break;
		case DT_JMPREL:
			d->jmprel = (const ElfW(Rela) *)dyn_ptr(bias, e->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			d->jmprelsz = e->d_un.d_val;
			break;
		case DT_PLTREL:
			pltrel = e->d_un.d_val;
			break;
		case DT_SYMENT:
			syment = e->d_un.d_val;
			break;
		}
	}
	if (!d->symtab || !d->strtab || relaent != sizeof(ElfW(Rela)) || pltrel != DT_RELA || syment != sizeof(ElfW(Sym)))
		return 0;
	return 1;
}

/* The hook a relocation names, or -1. */
static int got_hook_of(const struct got_dyn *d, const ElfW(Rela) *r)
{
	uint32_t type = ELF64_R_TYPE(r->r_info), si = ELF64_R_SYM(r->r_info);
	if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64) || si == 0 || r->r_addend != 0)
		return -1;
	uint32_t off = d->symtab[si].st_name;
	if (d->strsz && off >= d->strsz)
		return -1;
	const char *name = d->strtab + off;
	uint32_t h = got_hash(name);
	for (size_t i = 0; i < g_nhooks; i++)
		if (g_hooks[i].hash == h && strcmp(g_hooks[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Whether the loader has relocated the module: before that, its entries
 * still hold their link-time contents (a PLT stub's address within the
 * module's own span, or 0), never an address in the process. */
static int got_relocated(const struct dl_phdr_info *info, const struct got_dyn *d)
{
	uintptr_t bias = info->dlpi_addr, span = d->hi - bias;
	if (!bias)
		return 1; /* an executable at its link-time address: loaded first */
	const ElfW(Rela) *rel = d->jmprel ? d->jmprel : d->rela;
	size_t n = (d->jmprel ? d->jmprelsz : d->relasz) / sizeof(ElfW(Rela)), seen = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t t = ELF64_R_TYPE(rel[i].r_info);
		if (t != R_X86_64_JUMP_SLOT && t != R_X86_64_GLOB_DAT)
			continue;
		uintptr_t at = bias + rel[i].r_offset;
		if (at < d->lo || at + 8 > d->hi)
			continue;
		seen++;
		if (*(const uintptr_t *)at >= span)
			return 1;
	}
	return seen == 0;
}

static int got_seen(uintptr_t mod, uintptr_t dyn)
{
	for (size_t i = 0; i < g_nseen; i++)
		if (g_seen[i].mod == mod && g_seen[i].dyn == dyn)
			return 1;
	return 0;
}

static uintptr_t info_dyn(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			return info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
	return 0;
}

static void got_redirect(const struct dl_phdr_info *info, const struct got_dyn *d, const ElfW(Rela) *rel, size_t n)
{
	uintptr_t bias = info->dlpi_addr, dyn = info_dyn(info);
	for (size_t i = 0; i < n; i++) {
		int h = got_hook_of(d, &rel[i]);
		if (h < 0)
			continue;
		uintptr_t slot = bias + rel[i].r_offset;
		if (slot < d->lo || slot + 8 > d->hi)
			continue;
		uintptr_t v = __atomic_load_n((uintptr_t *)slot, __ATOMIC_ACQUIRE), repl = (uintptr_t)g_hooks[h].fn;
		int stub = ELF64_R_TYPE(rel[i].r_info) == R_X86_64_JUMP_SLOT && v >= d->lo && v < d->hi;
		/* an entry that holds the executable's PLT stub (the function's
		 * address the program takes) reaches us through the
		 * executable's own entry, redirected */
		if (!g_hooks[h].def || v == repl || (v != g_hooks[h].def && !stub))
			continue;
		if (!got_grow((void **)&g_patches, &g_patches_cap, g_npatches + 1, sizeof *g_patches))
			return;
		if (!got_write(slot, repl, d->relro_lo, d->relro_hi))
			continue;
		g_patches[g_npatches++] = (struct got_patch){slot, v, repl, bias, dyn};
		g_got_live++;
	}
}

/* Learn what the module's entries are bound to (before a scan): a bound
 * PLT entry holds the definition (the loader's PLT lookups skip an
 * executable's PLT stub), and an executable that takes a function's
 * address defines it, undefined, at its PLT stub, which dlsym returns. */
static int got_learn_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	uintptr_t dyn = info_dyn(info);
	struct got_dyn d;
	if (!dyn || !got_parse(info, &d) || !got_relocated(info, &d))
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		const ElfW(Rela) *rel = pass ? d.rela : d.jmprel;
		size_t n = (pass ? d.relasz : d.jmprelsz) / sizeof(ElfW(Rela));
		for (size_t i = 0; rel && i < n; i++) {
			int h = got_hook_of(&d, &rel[i]);
			if (h < 0)
				continue;
			struct got_hook *k = &g_hooks[h];
			const ElfW(Sym) *sym = &d.symtab[ELF64_R_SYM(rel[i].r_info)];
			if (sym->st_shndx == SHN_UNDEF && sym->st_value != 0 && !k->canon)
				k->canon = info->dlpi_addr + sym->st_value;
			if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT || k->bound)
				continue;
			uintptr_t slot = info->dlpi_addr + rel[i].r_offset;
			if (slot < d.lo || slot + 8 > d.hi)
				continue;
			uintptr_t v = *(const uintptr_t *)slot;
			if ((v < d.lo || v >= d.hi) && v != (uintptr_t)k->fn)
				k->bound = v; /* the first module's, in load order: the global scope's */
		}
	}
	return 0;
}

static int got_scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	int *first = arg;
	if (*first) {
		*first = 0;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
			g_got_adds = info->dlpi_adds;
			g_got_subs = info->dlpi_subs;
		}
	}
	uintptr_t dyn = info_dyn(info);
	if (!dyn || got_seen(info->dlpi_addr, dyn))
		return 0;
	struct got_dyn d;
	if (!got_parse(info, &d)) {
		/* ours, the vDSO, or nothing to redirect: never again */
		if (got_grow((void **)&g_seen, &g_seen_cap, g_nseen + 1, sizeof *g_seen))
			g_seen[g_nseen++] = (struct got_seen){info->dlpi_addr, dyn};
		return 0;
	}
	if (!got_relocated(info, &d)) {
		g_got_pending++;
		return 0;
	}
	if (d.jmprel)
		got_redirect(info, &d, d.jmprel, d.jmprelsz / sizeof(ElfW(Rela)));
	if (d.rela)
		got_redirect(info, &d, d.rela, d.relasz / sizeof(ElfW(Rela)));
	if (got_grow((void **)&g_seen, &g_seen_cap, g_nseen + 1, sizeof *g_seen))
		g_seen[g_nseen++] = (struct got_seen){info->dlpi_addr, dyn};
	return 0;
}

/* Our wrappers' addresses, through hidden aliases: the name itself would
 * be read from our own GOT, which the dynamic loader bound to the C
 * library's definition. */
#define GOT_SELF(sym) extern __typeof__(sym) got_self_##sym __attribute__((alias(#sym), copy(sym)));
GOT_SELF(malloc)
GOT_SELF(calloc)
GOT_SELF(realloc)
GOT_SELF(reallocarray)
GOT_SELF(free)
GOT_SELF(posix_memalign)
GOT_SELF(aligned_alloc)
GOT_SELF(memalign)
GOT_SELF(valloc)
GOT_SELF(pvalloc)
GOT_SELF(mmap)
GOT_SELF(mmap64)
GOT_SELF(munmap)
GOT_SELF(mremap)
GOT_SELF(dlopen)
GOT_SELF(dlclose)
GOT_SELF(dl_iterate_phdr)
GOT_SELF(_Znwm)
GOT_SELF(_Znam)
GOT_SELF(_ZnwmRKSt9nothrow_t)
GOT_SELF(_ZnamRKSt9nothrow_t)
GOT_SELF(_ZnwmSt11align_val_t)
GOT_SELF(_ZnamSt11align_val_t)
GOT_SELF(_ZnwmSt11align_val_tRKSt9nothrow_t)
GOT_SELF(_ZnamSt11align_val_tRKSt9nothrow_t)
GOT_SELF(_ZdlPv)
GOT_SELF(_ZdaPv)
GOT_SELF(_ZdlPvm)
GOT_SELF(_ZdaPvm)
GOT_SELF(_ZdlPvRKSt9nothrow_t)
GOT_SELF(_ZdaPvRKSt9nothrow_t)
GOT_SELF(_ZdlPvSt11align_val_t)
GOT_SELF(_ZdaPvSt11align_val_t)
GOT_SELF(_ZdlPvmSt11align_val_t)
GOT_SELF(_ZdaPvmSt11align_val_t)
GOT_SELF(_ZdlPvSt11align_val_tRKSt9nothrow_t)
GOT_SELF(_ZdaPvSt11align_val_tRKSt9nothrow_t)

static void got_hooks_init(void)
{
#define H(sym) {#sym, (void *)got_self_##sym, (void **)&real.sym, 0, 0, 0, 0}
#define X(sym) {#sym, (void *)got_self_##sym, (void **)&cxx_fn_##sym, 0, 0, 0, 0}
	static const struct got_hook all[] = {
	    H(malloc), H(calloc), H(realloc), H(reallocarray), H(free), H(posix_memalign), H(aligned_alloc), H(memalign),
	    H(valloc), H(pvalloc), H(mmap), H(mmap64), H(munmap), H(mremap), H(dlopen), H(dlclose), H(dl_iterate_phdr),
	    X(_Znwm), X(_Znam), X(_ZnwmRKSt9nothrow_t), X(_ZnamRKSt9nothrow_t), X(_ZnwmSt11align_val_t),
	    X(_ZnamSt11align_val_t), X(_ZnwmSt11align_val_tRKSt9nothrow_t), X(_ZnamSt11align_val_tRKSt9nothrow_t),
	    X(_ZdlPv), X(_ZdaPv), X(_ZdlPvm), X(_ZdaPvm), X(_ZdlPvRKSt9nothrow_t), X(_ZdaPvRKSt9nothrow_t),
	    X(_ZdlPvSt11align_val_t), X(_ZdaPvSt11align_val_t), X(_ZdlPvmSt11align_val_t), X(_ZdaPvmSt11align_val_t),
	    X(_ZdlPvSt11align_val_tRKSt9nothrow_t), X(_ZdaPvSt11align_val_tRKSt9nothrow_t),
	};
#undef H
#undef X
	if (g_nhooks)
		return;
	_Static_assert(sizeof all / sizeof all[0] <= sizeof g_hooks / sizeof g_hooks[0], "g_hooks too small");
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		g_hooks[i] = all[i];
		g_hooks[i].hash = got_hash(all[i].name);
	}
	g_nhooks = sizeof all / sizeof all[0];
}

/*
 * Redirect the entries of every module not looked at yet. g_got_lock held;
 * no lock of the loader's (dlsym takes the loader's lock, which must never
 * be waited for inside dl_iterate_phdr). Returns the entries redirected
 * now.
 */
static uint32_t got_scan(void)
{
	got_hooks_init();
	for (size_t i = 0; i < g_nhooks; i++) {
		void *def;
		IN_LIB(def = dlsym(RTLD_DEFAULT, g_hooks[i].name));
		g_hooks[i].def = (uintptr_t)def;
		g_hooks[i].bound = g_hooks[i].canon = 0;
	}
	IN_LIB(dlerror()); /* the names no module defines: not the program's error */
	iterate_phdr(got_learn_cb, NULL);
	for (size_t i = 0; i < g_nhooks; i++) {
		struct got_hook *k = &g_hooks[i];
		if (k->bound)
			k->def = k->bound;
		else if (k->def == k->canon)
			k->def = 0; /* only the executable's stub is known: leave it */
		if (k->def == (uintptr_t)k->fn)
			k->def = 0; /* a wrapper never forwards to itself */
		/* the wrapper forwards to what the entries held, set before any
		 * entry leads to it */
		if (k->def && __atomic_load_n(k->real, __ATOMIC_ACQUIRE) != (void *)k->def)
			__atomic_store_n(k->real, (void *)k->def, __ATOMIC_RELEASE);
	}
	g_got_pending = 0;
	int first = 1;
	iterate_phdr(got_scan_cb, &first);
	return g_got_live;
}

/* The loader's counters: a module was loaded or unloaded since the last
 * scan when they moved. */
static int got_counters_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

static int got_changed(void)
{
	unsigned long long c[2] = {0, 0};
	iterate_phdr(got_counters_cb, c);
	return c[0] != g_got_adds || c[1] != g_got_subs || g_got_pending;
}

/* Put back the entries of this module that still hold our wrappers. */
static int got_restore_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uint32_t *restored = arg;
	uintptr_t dyn = info_dyn(info);
	if (!dyn)
		return 0;
	struct got_dyn d;
	int parsed = 0;
	for (size_t i = 0; i < g_npatches; i++) {
		struct got_patch *p = &g_patches[i];
		if (p->mod != info->dlpi_addr || p->dyn != dyn || !p->slot)
			continue;
		if (!parsed) {
			if (!got_parse(info, &d))
				return 0;
			parsed = 1;
		}
		if (__atomic_load_n((uintptr_t *)p->slot, __ATOMIC_ACQUIRE) == p->repl &&
		    got_write(p->slot, p->orig, d.relro_lo, d.relro_hi))
			(*restored)++;
		p->slot = 0;
	}
	return 0;
}

/* Put every entry back, forget them and the modules looked at. g_got_lock
 * held. Returns the entries put back. An entry of a module unloaded
 * meanwhile went with it. */
static uint32_t got_restore(void)
{
	uint32_t restored = 0;
	if (g_npatches)
		iterate_phdr(got_restore_cb, &restored);
	g_npatches = 0;
	g_nseen = 0;
	g_got_live = 0;
	g_got_pending = 0;
	g_got_adds = g_got_subs = ~0ull;
	return restored;
}

#endif
