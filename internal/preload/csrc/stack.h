/*
 * stack.h: stack walks with frame pointers and with libunwind, the stack table
 * that de-duplicates stacks, and the module records that name the code
 * they point into.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_STACK_H
#define HEAPSCOPE_STACK_H

static int (*p_unw_backtrace)(void **, int);
static uintptr_t g_self_lo, g_self_hi; /* this library's text */

/* Frame-pointer walk from the wrapper's frame fp, bounded by the thread's
 * stack so that it never reads outside it, whatever rbp holds. */
static inline int fp_walk(uint64_t *out, int max, uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
	int n = 0;
	uintptr_t *f = (uintptr_t *)fp;
	out[n++] = f[1]; /* our own frame: always readable */
	if (fp < lo || fp >= hi)
		return n; /* on a stack we do not know (coroutine, signal stack) */
	uintptr_t next = f[0];
	while (n < max) {
		if (next <= fp || next > hi - 16 || (next & 7))
			break;
		fp = next;
		f = (uintptr_t *)fp;
		uintptr_t ret = f[1];
		if (ret < 4096)
			break;
		out[n++] = ret;
		next = f[0];
	}
	return n;
}

static HS_NOINLINE int dwarf_walk(uint64_t *out, int max)
{
	void *buf[HS_MAX_FRAMES + 16];
	int n;
	if (HS_LIKELY(tls.unw_warm)) {
		n = p_unw_backtrace(buf, max + 16);
	} else {
		/* the thread's first walk allocates libunwind's thread-local data */
		IN_LIB(n = p_unw_backtrace(buf, max + 16));
		tls.unw_warm = 1;
	}
	int i = 0, k = 0;
	while (i < n && (uintptr_t)buf[i] >= g_self_lo && (uintptr_t)buf[i] < g_self_hi)
		i++;
	for (; i < n && k < max; i++)
		out[k++] = (uint64_t)(uintptr_t)buf[i];
	return k;
}

static inline uint64_t hash_frames(const uint64_t *f, int n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
	for (int i = 0; i < n; i++) {
		h ^= f[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	h ^= h >> 29;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 32;
	return h ? h : 1;
}

/* The process-wide stack table and module set. g_stack_lock guards both. */
struct hs_stab_ent {
	uint64_t hash;
	uint64_t off; /* into g_frames */
	uint32_t n;
	uint32_t id;
};
static struct hs_stab_ent *g_stab;
static size_t g_stab_cap, g_stab_len;
static uint64_t *g_frames;
static size_t g_frames_len, g_frames_cap;
static uint32_t g_next_stack_id = 1;
static uint32_t g_stab_epoch;

struct hs_mod {
	uint64_t start, end, path_hash;
};
static struct hs_mod *g_mods;
static size_t g_mods_len, g_mods_cap;
static int g_mods_valid;

static void *map_anon(size_t n)
{
	void *p = sys_mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void stab_reset(void)
{
	if (g_stab)
		sys_munmap(g_stab, g_stab_cap * sizeof *g_stab);
	if (g_frames)
		sys_munmap(g_frames, g_frames_cap * 8);
	g_stab = NULL;
	g_frames = NULL;
	g_stab_cap = g_stab_len = g_frames_len = g_frames_cap = 0;
}

static int stab_grow(void)
{
	size_t cap = g_stab_cap ? g_stab_cap * 2 : 4096;
	struct hs_stab_ent *t = map_anon(cap * sizeof *t);
	if (!t)
		return 0;
	for (size_t i = 0; i < g_stab_cap; i++) {
		struct hs_stab_ent *e = &g_stab[i];
		if (!e->hash)
			continue;
		size_t j = e->hash & (cap - 1);
		while (t[j].hash)
			j = (j + 1) & (cap - 1);
		t[j] = *e;
	}
	if (g_stab)
		sys_munmap(g_stab, g_stab_cap * sizeof *g_stab);
	g_stab = t;
	g_stab_cap = cap;
	return 1;
}

static uint32_t stab_find(uint64_t h, const uint64_t *f, int n)
{
	if (!g_stab)
		return 0;
	for (size_t j = h & (g_stab_cap - 1);; j = (j + 1) & (g_stab_cap - 1)) {
		struct hs_stab_ent *e = &g_stab[j];
		if (!e->hash)
			return 0;
		if (e->hash == h && e->n == (uint32_t)n && memcmp(g_frames + e->off, f, (size_t)n * 8) == 0)
			return e->id;
	}
}

static int stab_add(uint64_t h, const uint64_t *f, int n, uint32_t id)
{
	if ((g_stab_len + 1) * 2 > g_stab_cap && !stab_grow())
		return 0;
	if (g_frames_len + (size_t)n > g_frames_cap) {
		size_t cap = g_frames_cap ? g_frames_cap * 2 : 65536;
		while (cap < g_frames_len + (size_t)n)
			cap *= 2;
		uint64_t *nf = g_frames ? sys_mremap(g_frames, g_frames_cap * 8, cap * 8, MREMAP_MAYMOVE) : map_anon(cap * 8);
		if (nf == MAP_FAILED || !nf)
			return 0;
		g_frames = nf;
		g_frames_cap = cap;
	}
	memcpy(g_frames + g_frames_len, f, (size_t)n * 8);
	size_t j = h & (g_stab_cap - 1);
	while (g_stab[j].hash)
		j = (j + 1) & (g_stab_cap - 1);
	g_stab[j] = (struct hs_stab_ent){h, g_frames_len, (uint32_t)n, id};
	g_frames_len += (size_t)n;
	g_stab_len++;
	return 1;
}

static int mod_covers(uint64_t a)
{
	size_t lo = 0, hi = g_mods_len;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (g_mods[mid].end <= a)
			lo = mid + 1;
		else if (g_mods[mid].start > a)
			hi = mid;
		else
			return 1;
	}
	return 0;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* in-memory GNU build-id of a loaded object */
static size_t build_id(const struct dl_phdr_info *info, uint8_t *out)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		size_t left = ph->p_memsz;
		while (left >= sizeof(ElfW(Nhdr))) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			size_t name = (nh->n_namesz + 3) & ~3u, desc = (nh->n_descsz + 3) & ~3u;
			size_t sz = sizeof *nh + name + desc;
			if (sz > left)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(p + sizeof *nh, "GNU", 4) == 0 &&
			    nh->n_descsz <= HS_BUILD_ID_MAX) {
				memcpy(out, p + sizeof *nh + name, nh->n_descsz);
				return nh->n_descsz;
			}
			p += sz;
			left -= sz;
		}
	}
	return 0;
}

/*
 * The loaded objects are listed (dl_iterate_phdr, which holds the loader's
 * lock) without g_stack_lock held, into a snapshot of this thread's own,
 * and the snapshot is installed under the lock: a program thread that
 * allocates inside its own dl_iterate_phdr callback (Rust's backtrace
 * does) holds the loader's lock while it waits for g_stack_lock, so a
 * thread holding g_stack_lock must never wait for the loader's.
 *
 * A snapshot is a run of entries, each [words][path hash][MODULE body of
 * words words], in mapped memory.
 */
struct mod_snap {
	uint64_t *buf;
	size_t len, cap; /* words */
	size_t count;    /* entries */
	unsigned long long adds, subs; /* dlpi_adds, dlpi_subs */
	int failed;
	char path[PATH_MAX];
};

static int snap_room(struct mod_snap *sc, size_t words)
{
	if (sc->len + words <= sc->cap)
		return 1;
	size_t cap = sc->cap ? sc->cap * 2 : 8192;
	while (cap < sc->len + words)
		cap *= 2;
	uint64_t *n = sc->buf ? sys_mremap(sc->buf, sc->cap * 8, cap * 8, MREMAP_MAYMOVE) : map_anon(cap * 8);
	if (n == MAP_FAILED || !n)
		return 0;
	sc->buf = n;
	sc->cap = cap;
	return 1;
}

static int mod_known(uint64_t start, uint64_t end, uint64_t ph)
{
	for (size_t i = 0; i < g_mods_len; i++)
		if (g_mods[i].start == start && g_mods[i].end == end && g_mods[i].path_hash == ph)
			return 1;
	return 0;
}

static int mod_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct mod_snap *sc = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		sc->adds = info->dlpi_adds;
		sc->subs = info->dlpi_subs;
	}
	const char *name = info->dlpi_name;
	if (!name || !*name)
		name = g_exe;
	else if (name[0] != '/' && strchr(name, '/')) {
		char *rp;
		IN_LIB(rp = realpath(name, sc->path));
		if (rp)
			name = sc->path;
	}
	size_t plen = strlen(name);
	if (plen > HS_MODULE_PATH_MAX)
		plen = HS_MODULE_PATH_MAX;
	uint64_t ph = hash_str(name);
	uint8_t id[HS_BUILD_ID_MAX];
	size_t idlen = (size_t)-1;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD || !(p->p_flags & PF_X) || p->p_memsz == 0)
			continue;
		if (idlen == (size_t)-1)
			idlen = build_id(info, id);
		size_t bytes = plen + idlen, words = 4 + (bytes + 7) / 8;
		if (!snap_room(sc, words + 2)) {
			sc->failed = 1;
			return 1;
		}
		uint64_t *e = sc->buf + sc->len, *w = e + 2;
		e[0] = words;
		e[1] = ph;
		w[0] = info->dlpi_addr + p->p_vaddr;
		w[1] = w[0] + p->p_memsz;
		w[2] = p->p_offset;
		w[3] = (uint64_t)plen | ((uint64_t)idlen << 32);
		memset(w + 4, 0, (bytes + 7) & ~(size_t)7);
		memcpy((char *)(w + 4), name, plen);
		memcpy((char *)(w + 4) + plen, id, idlen);
		sc->len += words + 2;
		sc->count++;
	}
	return 0;
}

static int cmp_mod(const void *a, const void *b)
{
	const struct hs_mod *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

static unsigned long long g_mods_adds, g_mods_subs; /* the snapshot g_mods was made from */

/* List the loaded objects. No lock of ours held. Returns 0 on failure. */
static struct mod_snap *snap_modules(void)
{
	struct mod_snap *sc = map_anon(sizeof *sc);
	if (!sc)
		return NULL;
	iterate_phdr(mod_cb, sc);
	if (sc->failed) {
		if (sc->buf)
			sys_munmap(sc->buf, sc->cap * 8);
		sys_munmap(sc, sizeof *sc);
		return NULL;
	}
	return sc;
}

static void snap_free(struct mod_snap *sc)
{
	if (sc->buf)
		sys_munmap(sc->buf, sc->cap * 8);
	sys_munmap(sc, sizeof *sc);
}

/* Report the executable segments of the snapshot's objects not yet
 * reported, and make them the module set; an older snapshot than the set's
 * (another thread installed a newer one meanwhile) is not installed.
 * g_stack_lock held. */
static int install_modules(struct hs_slot *s, struct mod_snap *sc)
{
	if (g_mods_valid && sc->adds + sc->subs < g_mods_adds + g_mods_subs)
		return 1;
	size_t cap = sc->count ? sc->count : 1;
	struct hs_mod *next = map_anon(cap * sizeof *next);
	if (!next) {
		g_mods_valid = 0;
		return 0;
	}
	size_t n = 0;
	for (size_t off = 0; off < sc->len; off += sc->buf[off] + 2) {
		uint64_t *e = sc->buf + off, *w = e + 2;
		next[n++] = (struct hs_mod){w[0], w[1], e[1]};
		if (mod_known(w[0], w[1], e[1]))
			continue;
		if (!write_record(s, HS_REC_MODULE, 0, w, (uint32_t)e[0], 0)) {
			sys_munmap(next, cap * sizeof *next);
			g_mods_valid = 0;
			return 0;
		}
	}
	/* insertion order is load order: sort by address for lookups */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && cmp_mod(&next[j - 1], &next[j]) > 0; j--) {
			struct hs_mod t = next[j];
			next[j] = next[j - 1];
			next[j - 1] = t;
		}
	if (g_mods)
		sys_munmap(g_mods, g_mods_cap * sizeof *g_mods);
	g_mods = next;
	g_mods_len = n;
	g_mods_cap = cap;
	g_mods_adds = sc->adds;
	g_mods_subs = sc->subs;
	g_mods_valid = 1;
	return 1;
}

/*
 * A stack this thread has not seen lately: look it up in the process-wide
 * table, defining it (and the modules its frames are in) in the ring on
 * first sight.
 */
static HS_NOINLINE int define_stack(struct hs_slot *s, uint64_t *f, int n, uint64_t h, uint32_t epoch,
                                    struct hs_cache_ent *ce, uint32_t *id)
{
	/* set before locking and cleared after unlocking: a signal handler
	 * that finds it set queues its call instead of locking */
	tls.stack_locked = 1;
	pthread_mutex_lock(&g_stack_lock);
	int ok = 1;
	if (g_stab_epoch != epoch) {
		/* code was unloaded: addresses may now mean other code */
		stab_reset();
		g_mods_valid = 0;
		g_stab_epoch = epoch;
	}
	int m = 0;
	while (m < n && g_mods_valid && mod_covers(f[m]))
		m++;
	if (m < n) {
		/* the objects are listed without the lock (see struct mod_snap) */
		pthread_mutex_unlock(&g_stack_lock);
		struct mod_snap *sc = snap_modules();
		pthread_mutex_lock(&g_stack_lock);
		if (g_stab_epoch != epoch) { /* unloaded meanwhile: as above */
			stab_reset();
			g_mods_valid = 0;
			g_stab_epoch = epoch;
		}
		ok = sc && install_modules(s, sc);
		if (sc)
			snap_free(sc);
		m = 0;
		while (m < n && g_mods_valid && mod_covers(f[m]))
			m++;
	}
	/* Frames outside every loaded object are garbage from a walk through
	 * code without frame pointers (or JIT code): the stack ends there. */
	uint32_t sid = 0;
	if (ok && m > 0) {
		uint64_t h2 = m == n ? h : hash_frames(f, m);
		sid = stab_find(h2, f, m);
		if (!sid) {
			sid = g_next_stack_id;
			if (write_record(s, HS_REC_STACK, sid, f, (uint32_t)m, 0)) {
				g_next_stack_id++;
				/* if the table cannot grow, the stack is sent again
				 * under a new id next time: wasteful, not wrong */
				stab_add(h2, f, m, sid);
			} else {
				ok = 0;
				sid = 0;
			}
		}
	}
	pthread_mutex_unlock(&g_stack_lock);
	tls.stack_locked = 0;
	if (ok) {
		ce->hash = h;
		ce->id = sid;
	}
	*id = sid;
	return ok;
}

/*
 * The id of the stack f[0..n): from the thread's cache, else from
 * define_stack. Returns 0 when a record could not be written.
 */
static HS_INLINE int stack_id(struct hs_slot *s, uint64_t *f, int n, uint32_t *id)
{
	uint32_t epoch = __atomic_load_n(&g_dl_epoch, __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(s->cache_epoch != epoch)) {
		memset(s->cache, 0, sizeof s->cache);
		s->cache_epoch = epoch;
	}
	uint64_t h = hash_frames(f, n);
	struct hs_cache_ent *ce = &s->cache[h & (CACHE_SIZE - 1)];
	if (HS_LIKELY(ce->hash == h)) {
		*id = ce->id;
		return 1;
	}
	return define_stack(s, f, n, h, epoch, ce, id);
}

#endif
