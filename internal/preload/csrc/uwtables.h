/*
 * uwtables.h: table-driven unwinding (--unwind tables): asking the collector for
 * each loaded file's unwind table, installing it, and walking with it.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_UWTABLES_H
#define HEAPSCOPE_UWTABLES_H

/*
 * The collector builds an unwind table per loaded file from its .eh_frame
 * (package unwind; format in unwind/FORMAT.md) and sends it as a sealed
 * memfd on a channel of our own (HS_MSG_TABLES). A walk step looks up the
 * rule of the return address: first in a process-wide cache (pc -> rule),
 * then by binary search in the module's table. Where no table answers yet
 * (not arrived, no rule) the whole stack is walked by libunwind instead, as
 * --unwind dwarf does; without libunwind, by frame pointers. Nothing here
 * ever waits: the state it shares is taken with a trylock, and a thread
 * that finds it taken falls back.
 */

struct hs_uw_entry {
	uint32_t addr;
	uint16_t cfa_off;
	uint8_t kind;
	uint8_t aux;
};
#define UW_FALLBACK 0
#define UW_RSP 1
#define UW_RBP 2
#define UW_PLT 3
#define UW_END 4
#define UW_NOMOD 7 /* cache only: the pc is in no loaded file */

#define UWT_WANTED 0 /* to be asked for */
#define UWT_ASKED 1
#define UWT_READY 2
#define UWT_NONE 3 /* the collector has none: fall back */

struct uw_table {
	const struct hs_uw_entry *e; /* set (release) once the table is mapped */
	uint32_t n;
	uint32_t state;
	uint64_t base;
	uint32_t idlen;
	uint8_t id[HS_BUILD_ID_MAX];
};
#define UW_MAX_TABLES 2048
static struct uw_table g_uwt[UW_MAX_TABLES];
static uint32_t g_uwt_len;

struct uw_mod {
	uint64_t start, end, bias;
	struct uw_table *t; /* NULL: no build-id, no table */
};
struct uw_set {
	uint32_t len, epoch;
	unsigned long long adds, subs; /* dlpi_adds, dlpi_subs when it was made */
	size_t bytes;
	struct uw_mod m[];
};
/* Readers load g_uwset without a lock, so a replaced set is never unmapped:
 * it is rebuilt only when new code is loaded, and is small. */
static struct uw_set *g_uwset;

static uint32_t g_uw_lock;   /* g_gen + 1 while held; a value of an older generation is a lock left by fork */
static int g_uw_chan = -1;   /* our end of the table channel */
static ino_t g_uw_chan_ino;
static uint32_t g_uw_chan_gen; /* g_gen of the connection the channel was sent on */
static uint32_t g_uw_chan_fails;
static uint32_t g_uw_wanted;   /* tables in UWT_WANTED: the next refresh asks for them */
static uint32_t g_uw_asked;    /* tables in UWT_ASKED: answers to read */
static char g_uw_path[PATH_MAX];
static void load_libunwind(void);

/* The rule cache: k = pc ^ v, v = rule | epoch << 32, so that a torn pair
 * written by two threads at once never matches. */
#define UW_CACHE 8192
struct uw_cache_ent {
	uint64_t k, v;
};
static struct uw_cache_ent g_uwcache[UW_CACHE];

static inline uint32_t uw_slot(uint64_t pc) { return (uint32_t)((pc * 0x9E3779B97F4A7C15ull) >> 51) & (UW_CACHE - 1); }

static int uw_trylock(void)
{
	uint32_t mine = g_gen + 1, cur = 0;
	if (__atomic_compare_exchange_n(&g_uw_lock, &cur, mine, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return 1;
	/* held in the parent when this process forked: no one will release it */
	return cur != mine && __atomic_compare_exchange_n(&g_uw_lock, &cur, mine, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static void uw_unlock(void) { __atomic_store_n(&g_uw_lock, 0, __ATOMIC_RELEASE); }

static struct uw_table *uw_table_for(const uint8_t *id, size_t idlen, int add)
{
	for (uint32_t i = 0; i < g_uwt_len; i++)
		if (g_uwt[i].idlen == idlen && memcmp(g_uwt[i].id, id, idlen) == 0)
			return &g_uwt[i];
	if (!add || g_uwt_len == UW_MAX_TABLES)
		return NULL;
	struct uw_table *t = &g_uwt[g_uwt_len++];
	t->idlen = (uint32_t)idlen;
	memcpy(t->id, id, idlen);
	t->state = UWT_WANTED;
	g_uw_wanted++;
	return t;
}

/* The channel is usable: ours, and made on the current connection. */
static int uw_chan_ok(void)
{
	struct stat st;
	return g_uw_chan >= 0 && g_uw_chan_gen == g_gen && fstat(g_uw_chan, &st) == 0 && S_ISSOCK(st.st_mode) &&
	       st.st_ino == g_uw_chan_ino;
}

static void uw_drop_channel(void)
{
	struct stat st;
	/* after a fork the descriptor is our copy; if the program closed it,
	 * the number may be someone else's now: leave that alone */
	if (g_uw_chan >= 0 && fstat(g_uw_chan, &st) == 0 && st.st_ino == g_uw_chan_ino)
		close(g_uw_chan);
	g_uw_chan = -1;
	for (uint32_t i = 0; i < g_uwt_len; i++)
		if (g_uwt[i].state == UWT_ASKED) {
			g_uwt[i].state = UWT_WANTED; /* the answer went to the old channel */
			g_uw_wanted++;
			g_uw_asked--;
		}
}

/* Make the table channel and send it on the connection. g_uw_lock held. */
static int uw_channel(void)
{
	if (uw_chan_ok())
		return 1;
	if (g_uw_chan >= 0)
		uw_drop_channel();
	if (g_uw_chan_fails >= 3 || pthread_mutex_trylock(&g_lock) != 0)
		return 0;
	int ok = 0;
	if (g_mode == MODE_ON && g_conn_gen == g_gen && sock_ok()) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0) {
			struct stat st;
			if (send_fd(HS_MSG_TABLES, 0, sv[1]) && fstat(sv[0], &st) == 0) {
				g_uw_chan = sv[0];
				g_uw_chan_ino = st.st_ino;
				g_uw_chan_gen = g_gen;
				ok = 1;
			} else {
				close(sv[0]);
			}
			close(sv[1]);
		}
	}
	pthread_mutex_unlock(&g_lock);
	if (!ok)
		g_uw_chan_fails++;
	return ok;
}

static void uw_ask(struct uw_table *t, const char *path)
{
	static uint64_t msg[(HS_TABLE_REQ_SIZE + HS_BUILD_ID_MAX + PATH_MAX) / 8 + 1];
	size_t plen = strlen(path);
	if (plen == 0 || plen > HS_MODULE_PATH_MAX || plen > PATH_MAX)
		return;
	struct hs_table_req *r = (struct hs_table_req *)msg;
	*r = (struct hs_table_req){HS_MAGIC, HS_VERSION, HS_MSG_TABLE_REQ, t->idlen, (uint32_t)plen, 0};
	memcpy((char *)msg + HS_TABLE_REQ_SIZE, t->id, t->idlen);
	memcpy((char *)msg + HS_TABLE_REQ_SIZE + t->idlen, path, plen);
	size_t n = HS_TABLE_REQ_SIZE + t->idlen + plen;
	if (send(g_uw_chan, msg, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n) {
		t->state = UWT_ASKED;
		g_uw_wanted--;
		g_uw_asked++;
	}
}

struct uw_scan {
	struct uw_set *set; /* NULL: only ask for the wanted tables */
	size_t cap;
	unsigned long long adds, subs;
};

static int uw_scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct uw_scan *sc = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		sc->adds = info->dlpi_adds;
		sc->subs = info->dlpi_subs;
	}
	if (!sc->cap)
		return 1; /* only the counters */
	struct uw_table *t = NULL;
	int looked = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD || !(p->p_flags & PF_X) || p->p_memsz == 0)
			continue;
		if (!looked) {
			looked = 1;
			uint8_t id[HS_BUILD_ID_MAX];
			size_t idlen = build_id(info, id);
			if (idlen > 0 && (t = uw_table_for(id, idlen, 1)) && t->state == UWT_WANTED && g_uw_chan >= 0) {
				const char *name = info->dlpi_name;
				if (!name || !*name)
					name = g_exe;
				else if (name[0] != '/') {
					char *rp = NULL;
					IN_LIB(rp = realpath(name, g_uw_path));
					if (rp)
						name = g_uw_path;
				}
				if (name[0] == '/') {
					uw_ask(t, name);
				} else { /* no file to build from (the vDSO): fall back there */
					t->state = UWT_NONE;
					g_uw_wanted--;
				}
			}
		}
		if (!sc->set)
			break;
		if (sc->set->len == sc->cap)
			return 1; /* full: the rest falls back */
		sc->set->m[sc->set->len++] =
		    (struct uw_mod){info->dlpi_addr + p->p_vaddr, info->dlpi_addr + p->p_vaddr + p->p_memsz, info->dlpi_addr, t};
	}
	return 0;
}

/* Rebuild the module set if code was loaded or unloaded since it was made,
 * asking for the tables of new files. g_uw_lock held. */
static void uw_refresh(uint32_t epoch)
{
	struct uw_set *old = g_uwset;
	struct uw_scan sc = {NULL, 0, 0, 0};
	iterate_phdr(uw_scan_cb, &sc); /* only the counters: one callback */
	if (old && old->epoch == epoch && old->adds == sc.adds && old->subs == sc.subs)
		return;
	size_t cap = 1024, bytes = sizeof(struct uw_set) + cap * sizeof(struct uw_mod);
	struct uw_set *set = map_anon(bytes);
	if (!set)
		return;
	set->bytes = bytes;
	set->epoch = epoch;
	uw_channel();
	sc = (struct uw_scan){set, cap, 0, 0};
	iterate_phdr(uw_scan_cb, &sc);
	set->adds = sc.adds;
	set->subs = sc.subs;
	for (uint32_t i = 1; i < set->len; i++)
		for (uint32_t j = i; j > 0 && set->m[j - 1].start > set->m[j].start; j--) {
			struct uw_mod x = set->m[j];
			set->m[j] = set->m[j - 1];
			set->m[j - 1] = x;
		}
	__atomic_store_n(&g_uwset, set, __ATOMIC_RELEASE);
}

/* Ask for the tables not asked for yet (a new connection after a fork, a
 * request that did not fit). g_uw_lock held. */
static void uw_ask_wanted(void)
{
	if (!uw_channel()) {
		if (g_uw_chan_fails >= 3) { /* no channel, ever: stop asking */
			for (uint32_t i = 0; i < g_uwt_len; i++)
				if (g_uwt[i].state == UWT_WANTED)
					g_uwt[i].state = UWT_NONE;
			g_uw_wanted = 0;
		}
		return;
	}
	struct uw_scan sc = {NULL, 1, 0, 0};
	iterate_phdr(uw_scan_cb, &sc);
}

/* Map a table received as a sealed memfd. g_uw_lock held. */
static void uw_install(struct uw_table *t, int fd)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	int need = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || seals < 0 || (seals & need) != need || st.st_size < 24 ||
	    st.st_size > (1 << 28)) {
		t->state = UWT_NONE;
		return;
	}
	size_t sz = (size_t)st.st_size;
	const uint8_t *p = sys_mmap(NULL, sz, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		t->state = UWT_NONE;
		return;
	}
	uint16_t ver, idlen;
	uint64_t base;
	uint32_t n;
	memcpy(&ver, p + 4, 2);
	memcpy(&idlen, p + 6, 2);
	memcpy(&base, p + 8, 8);
	memcpy(&n, p + 16, 4);
	size_t off = 24 + (((size_t)idlen + 7) & ~(size_t)7);
	if (memcmp(p, "HSUW", 4) != 0 || ver != 1 || idlen != t->idlen || memcmp(p + 24, t->id, idlen) != 0 ||
	    n < 2 || off + (size_t)n * 8 != sz) {
		sys_munmap((void *)p, sz);
		t->state = UWT_NONE;
		return;
	}
	t->n = n;
	t->base = base;
	__atomic_store_n(&t->e, (const struct hs_uw_entry *)(p + off), __ATOMIC_RELEASE);
	t->state = UWT_READY;
}

/* Read the answers that arrived. g_uw_lock held. */
static void uw_poll(void)
{
	if (!uw_chan_ok())
		return;
	for (int k = 0; k < 64; k++) {
		struct hs_table_msg m;
		int fds[4], nfd;
		ssize_t r = recv_fds(g_uw_chan, &m, sizeof m, MSG_DONTWAIT, fds, 4, &nfd);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) {
			uw_drop_channel(); /* the collector is gone */
			g_uw_chan_fails = 3;
			return;
		}
		struct uw_table *t = NULL;
		if (r == HS_TABLE_MSG_SIZE && m.magic == HS_MAGIC && m.version == HS_VERSION && m.type == HS_MSG_TABLE &&
		    m.id_len > 0 && m.id_len <= HS_BUILD_ID_MAX)
			t = uw_table_for(m.id, m.id_len, 0);
		if (t && t->state == UWT_ASKED) {
			g_uw_asked--;
			if (m.status == 0 && nfd == 1)
				uw_install(t, fds[0]);
			else
				t->state = UWT_NONE;
		}
		for (int i = 0; i < nfd; i++)
			close(fds[i]);
	}
}

enum { UW_OK, UW_STOP, UW_FALL, UW_STALE };

static HS_NOINLINE int uw_rule_slow(uint64_t pc, uint32_t epoch, uint32_t *rule, struct uw_cache_ent *ce);

/* The rule for the frame whose return address is pc: *rule packs
 * cfa_off | kind << 16 | aux << 24. The cache is checked inline: a walk
 * makes one check per frame. */
static HS_INLINE int uw_rule(uint64_t pc, uint32_t epoch, uint32_t *rule)
{
	struct uw_cache_ent *ce = &g_uwcache[uw_slot(pc)];
	uint64_t k = __atomic_load_n(&ce->k, __ATOMIC_RELAXED), v = __atomic_load_n(&ce->v, __ATOMIC_RELAXED);
	if (HS_LIKELY((k ^ v) == pc && (uint32_t)(v >> 32) == epoch)) {
		*rule = (uint32_t)v;
		return ((*rule >> 16) & 0xff) == UW_NOMOD ? UW_STOP : UW_OK;
	}
	return uw_rule_slow(pc, epoch, rule, ce);
}

/* A cache miss: find the module and search its table. */
static HS_NOINLINE int uw_rule_slow(uint64_t pc, uint32_t epoch, uint32_t *rule, struct uw_cache_ent *ce)
{
	const struct uw_set *set = __atomic_load_n(&g_uwset, __ATOMIC_ACQUIRE);
	if (!set || set->epoch != epoch)
		return UW_STALE;
	uint64_t a = pc - 1; /* the call, not what follows it */
	uint32_t lo = 0, hi = set->len;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (set->m[mid].start <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || a >= set->m[lo - 1].end)
		return UW_STALE;
	const struct uw_mod *m = &set->m[lo - 1];
	const struct uw_table *t = m->t;
	const struct hs_uw_entry *e = t ? __atomic_load_n(&t->e, __ATOMIC_ACQUIRE) : NULL;
	if (!e)
		return UW_FALL;
	uint64_t va = a - m->bias;
	if (va < t->base || va - t->base > 0xffffffffull)
		return UW_FALL;
	uint32_t x = (uint32_t)(va - t->base), l = 0, h = t->n;
	while (l < h) { /* the last entry with addr <= x */
		uint32_t mid = (l + h) / 2;
		if (e[mid].addr <= x)
			l = mid + 1;
		else
			h = mid;
	}
	if (l == 0 || l == t->n || e[l - 1].kind == UW_FALLBACK || e[l - 1].kind > UW_END)
		return UW_FALL;
	*rule = e[l - 1].cfa_off | (uint32_t)e[l - 1].kind << 16 | (uint32_t)e[l - 1].aux << 24;
	uint64_t nv = *rule | (uint64_t)epoch << 32;
	__atomic_store_n(&ce->v, nv, __ATOMIC_RELAXED);
	__atomic_store_n(&ce->k, pc ^ nv, __ATOMIC_RELAXED);
	return UW_OK;
}

/* Remember that pc is in no loaded file (JIT code, garbage): stop there. */
static void uw_cache_stop(uint64_t pc, uint32_t epoch)
{
	struct uw_cache_ent *ce = &g_uwcache[uw_slot(pc)];
	uint64_t nv = (uint32_t)UW_NOMOD << 16 | (uint64_t)epoch << 32;
	__atomic_store_n(&ce->v, nv, __ATOMIC_RELAXED);
	__atomic_store_n(&ce->k, pc ^ nv, __ATOMIC_RELAXED);
}

/*
 * Walk from the wrapper's frame fp with the tables, reading only the
 * thread's stack [lo, hi). Returns the frames found; *st says why it
 * stopped: UW_STOP (the stack's end, or a frame outside every file or
 * outside the stack), UW_FALL (no table answers here), UW_STALE (a frame in
 * a file loaded since the module set was made).
 */
static HS_INLINE int uw_walk(uint64_t *out, int max, uintptr_t fp, uintptr_t lo, uintptr_t hi, uint32_t epoch,
                             int *st)
{
	int n = 0;
	uintptr_t *f = (uintptr_t *)fp;
	uint64_t pc = f[1], rsp = fp + 16, rbp = f[0];
	out[n++] = pc;
	*st = UW_STOP;
	if (fp < lo || fp >= hi)
		return n;
	while (n < max) {
		uint32_t rule;
		int r = uw_rule(pc, epoch, &rule);
		if (r != UW_OK) {
			*st = r;
			return n;
		}
		uint32_t kind = (rule >> 16) & 0xff, off = rule & 0xffff;
		int8_t aux = (int8_t)(rule >> 24);
		uint64_t cfa;
		switch (kind) {
		case UW_RSP:
			cfa = rsp + off;
			break;
		case UW_RBP:
			cfa = rbp + off;
			break;
		case UW_PLT:
			cfa = rsp + off + ((pc & 15) >= (uint8_t)aux ? 8 : 0);
			aux = 0;
			break;
		default: /* UW_END: the outermost frame */
			return n;
		}
		if (cfa <= rsp || cfa > hi || (cfa & 7))
			return n;
		if (aux) {
			uint64_t at = cfa + (int64_t)aux * 8;
			if (at < rsp || at > hi - 8)
				return n;
			rbp = *(const uint64_t *)at;
		}
		pc = *(const uint64_t *)(cfa - 8);
		rsp = cfa;
		if (pc < 4096)
			return n;
		out[n++] = pc;
	}
	return n;
}

/* The stack of this call with the tables, or whatever can stand in for
 * them. */
static HS_NOINLINE int uw_capture(uint64_t *out, int max, uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
	uint32_t epoch = __atomic_load_n(&g_dl_epoch, __ATOMIC_ACQUIRE);
	int st, n = uw_walk(out, max, fp, lo, hi, epoch, &st);
	if (HS_LIKELY(st == UW_STOP))
		return n;
	if (uw_trylock()) {
		if (st == UW_STALE) {
			uw_refresh(epoch);
			n = uw_walk(out, max, fp, lo, hi, epoch, &st);
			if (st == UW_STALE) {
				uw_cache_stop(out[n - 1], epoch); /* in no loaded file */
				st = UW_STOP;
			}
		}
		if (st == UW_FALL) {
			if (g_uw_wanted || (g_uw_chan >= 0 && g_uw_chan_gen != g_gen))
				uw_ask_wanted();
			if (g_uw_asked) {
				uw_poll();
				n = uw_walk(out, max, fp, lo, hi, epoch, &st);
			}
		}
		uw_unlock();
	}
	if (st != UW_FALL && st != UW_STALE)
		return n;
	if (g_unwind == HS_UNWIND_TABLES && !tls.in_phdr && __atomic_load_n(&p_unw_backtrace, __ATOMIC_ACQUIRE))
		return dwarf_walk(out, max);
	return fp_walk(out, max, fp, lo, hi);
}

__attribute__((constructor(102))) static void uw_init(void)
{
	if (g_mode == MODE_ON && g_unwind == HS_UNWIND_TABLES && !p_unw_backtrace) {
		uint32_t saved = tls.in_hook;
		tls.in_hook = HOOK_LIB;
		load_libunwind();
		tls.in_hook = saved;
	}
}

/*
 * The id of the stack of this call. *id is 0 when no frame was found.
 * Returns 0 when a record could not be written.
 */
static HS_INLINE int capture(struct hs_tls *t, struct hs_slot *s, uintptr_t fp, uint32_t *id)
{
	uint64_t f[HS_MAX_FRAMES + 1];
	int n;
	if (HS_UNLIKELY(t->stack_retry))
		stack_bounds(t);
	if (HS_UNLIKELY(g_unwind == HS_UNWIND_DWARF) && !t->in_phdr && __atomic_load_n(&p_unw_backtrace, __ATOMIC_ACQUIRE))
		n = dwarf_walk(f, (int)g_max_frames);
	else if (g_unwind == HS_UNWIND_TABLES || g_unwind == HS_UNWIND_TABLES_FP)
		n = uw_capture(f, (int)g_max_frames, fp, t->stack_lo, t->stack_hi);
	else
		n = fp_walk(f, (int)g_max_frames, fp, t->stack_lo, t->stack_hi);
	*id = 0;
	if (n == 0)
		return 1;
	return stack_id(s, f, n, id);
}

#endif
