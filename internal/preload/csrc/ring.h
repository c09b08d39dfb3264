/*
 * ring.h: the per-thread rings: reserving and publishing records, waiting
 * for room (block mode) or counting losses (drop mode), waking the
 * collector, and attaching a thread to a ring.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_RING_H
#define HEAPSCOPE_RING_H

#define CACHE_SIZE 4096 /* per-slot stack cache entries, a power of two */

struct hs_cache_ent {
	uint64_t hash;
	uint32_t id;
	uint32_t pad;
};

struct hs_slot {
	uint8_t *map;  /* header page + data, shared with the collector */
	uint8_t *data;
	volatile uint64_t *head_p, *seq_p, *last_ts_p, *lost_p, *tail_p;
	volatile uint32_t *waiting_p;
	uint64_t size, mask, half;
	uint64_t head;        /* published bytes (our copy) */
	uint64_t seq;
	uint64_t lost;
	uint64_t cached_tail; /* the collector's tail as last read */
	uint64_t nudged;      /* head when we last rang the doorbell */
	uint32_t index;
	pid_t tid;
	uint32_t exiting;     /* the owner ran its thread-exit destructor */
	uint32_t depth;       /* open sections: a signal handler's record nests in one */
	uint32_t stalled;     /* gave up waiting: the collector's heartbeat stood still */
	uint64_t stall_hb;    /* the heartbeat then: drop without waiting until it moves */
	uint32_t cache_epoch;
	struct hs_slot *next;
	struct hs_cache_ent cache[CACHE_SIZE];
};

static struct hs_slot *g_slots;
static uint32_t g_nslots;
/* The rings of an injected process's earlier sessions (inject.h), until
 * their threads come back or are gone, or heapscope_inject_stop. */
static struct hs_slot *g_stale;

static void slot_unmap(struct hs_slot *s)
{
	sys_munmap(s->map, HS_RING_DATA + (size_t)s->size);
	sys_munmap(s, sizeof *s);
}

/* Unmap the stale ring old (this thread's, of an earlier session) and the
 * stale rings of threads that are gone. g_lock held. */
static void stale_sweep(struct hs_slot *old)
{
	int looked = 0;
	for (struct hs_slot **pp = &g_stale; *pp && looked < 64; looked++) {
		struct hs_slot *c = *pp;
		if (c == old || (c->tid && syscall(SYS_tgkill, g_pid, c->tid, 0) < 0 && errno == ESRCH)) {
			*pp = c->next;
			slot_unmap(c);
			continue;
		}
		pp = &c->next;
	}
}

static void ring_doorbell(void)
{
	if (__atomic_load_n(ctl32(HS_CTL_SLEEPING), __ATOMIC_SEQ_CST)) {
		__atomic_add_fetch(ctl32(HS_CTL_DOORBELL), 1, __ATOMIC_SEQ_CST);
		futex(ctl32(HS_CTL_DOORBELL), FUTEX_WAKE, 1, NULL);
	}
}

/* The ring is over half full: wake the collector if it sleeps. */
static HS_NOINLINE void nudge(struct hs_slot *s)
{
	s->cached_tail = __atomic_load_n(s->tail_p, __ATOMIC_ACQUIRE);
	if (s->head - s->cached_tail <= s->half || s->head - s->nudged < s->size / 8)
		return;
	s->nudged = s->head;
	ring_doorbell();
}

static inline int closed(void)
{
	return (__atomic_load_n(g_state, __ATOMIC_RELAXED) & HS_STATE_CLOSED) != 0;
}

/* How long a thread waits for room while the collector's heartbeat stands
 * still (a collector stopped or frozen) before it drops, and counts, what
 * it cannot write. */
#define HS_STALL_NS 10000000000LL

/*
 * Wait until need bytes are free. Returns 0 when the record cannot be
 * written: the ring is full in drop mode, the session is over, or the
 * collector's heartbeat stood still for HS_STALL_NS (then, until it moves,
 * later calls give up at once).
 */
static HS_NOINLINE int make_room(struct hs_slot *s, uint64_t need, int must)
{
	unsigned spins = 0, waits = 0;
	uint64_t hb = 0;
	int64_t hb_at = 0;
	for (;;) {
		s->cached_tail = __atomic_load_n(s->tail_p, __ATOMIC_ACQUIRE);
		if (s->head + need - s->cached_tail <= s->size)
			return 1;
		ring_doorbell();
		if (g_on_full == HS_ON_FULL_DROP && !must) {
			/* nobody drains a ring whose collector died: look now and
			 * then (the losses are counted after we return) */
			if ((s->lost & 4095) == 4095 && collector_gone())
				turn_off();
			return 0;
		}
		if (closed()) {
			turn_off();
			return 0;
		}
		if (s->stalled) {
			if (__atomic_load_n(ctl64(HS_CTL_HEARTBEAT), __ATOMIC_ACQUIRE) == s->stall_hb)
				return 0;
			s->stalled = 0;
		}
		/* While we wait, a signal handler's call writes to the ring
		 * itself (see nested): our caller looks at the ring again. */
		uint32_t was_safe = tls.safe_point;
		if (spins < 16) {
			spins++;
			tls.safe_point = 1;
			sched_yield();
			tls.safe_point = was_safe;
			continue;
		}
		__atomic_store_n(s->waiting_p, 1, __ATOMIC_SEQ_CST);
		uint64_t t = __atomic_load_n(s->tail_p, __ATOMIC_SEQ_CST);
		if (s->head + need - t > s->size) {
			struct timespec ts = {0, 50 * 1000 * 1000};
			/* the futex word is the tail's low half (little-endian) */
			tls.safe_point = 1;
			futex((volatile uint32_t *)s->tail_p, FUTEX_WAIT, (uint32_t)t, &ts);
			tls.safe_point = was_safe;
		}
		__atomic_store_n(s->waiting_p, 0, __ATOMIC_RELAXED);
		if (++waits % 4 == 0 && collector_gone()) {
			turn_off();
			return 0;
		}
		uint64_t now_hb = __atomic_load_n(ctl64(HS_CTL_HEARTBEAT), __ATOMIC_ACQUIRE);
		int64_t now = mono_ns();
		if (hb_at == 0 || now_hb != hb) {
			hb = now_hb;
			hb_at = now;
		} else if (now - hb_at > HS_STALL_NS) {
			s->stall_hb = hb;
			s->stalled = 1;
			return 0;
		}
	}
}

static inline void section_begin(struct hs_slot *s)
{
	if (s->depth++)
		return; /* a signal handler's record, inside the section it interrupted */
	s->seq++;
	__atomic_store_n(s->seq_p, s->seq, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void section_end(struct hs_slot *s)
{
	if (--s->depth)
		return;
	s->seq++;
	__atomic_store_n(s->seq_p, s->seq, __ATOMIC_RELEASE);
}

/*
 * Reserve words*8 bytes inside a section. Returns where to write them, or
 * NULL. A PAD record fills the end of the ring when the record would wrap.
 */
static inline uint64_t *reserve(struct hs_slot *s, uint32_t words, uint64_t *newhead, int must)
{
	uint64_t bytes = (uint64_t)words * 8;
	uint64_t head, off, pad;
	for (;;) {
		head = s->head;
		off = head & s->mask;
		pad = off + bytes > s->size ? s->size - off : 0;
		if (HS_LIKELY(head + pad + bytes - s->cached_tail <= s->size))
			break;
		if (!make_room(s, pad + bytes, must))
			return NULL;
		/* look again: a signal handler may have written while we waited */
	}
	if (pad) {
		*(uint64_t *)(s->data + off) = HS_REC_PAD | ((pad / 8) << 8);
		head += pad;
		off = 0;
	}
	*newhead = head + bytes;
	return (uint64_t *)(s->data + off);
}

static inline void publish(struct hs_slot *s, uint64_t newhead, uint64_t ts)
{
	__atomic_store_n(s->last_ts_p, ts, __ATOMIC_RELAXED);
	__atomic_store_n(s->head_p, newhead, __ATOMIC_RELEASE);
	s->head = newhead;
	if (HS_UNLIKELY(newhead - s->cached_tail > s->half))
		nudge(s);
}

static inline uint64_t hdr(uint32_t type, uint32_t words, uint32_t arg)
{
	return (uint64_t)type | ((uint64_t)words << 8) | ((uint64_t)arg << 32);
}

/* An event that could not be written while tracing: a full ring in drop
 * mode, or, in block mode, a collector that stopped draining. */
static void count_lost(struct hs_slot *s)
{
	if (g_mode == MODE_ON) {
		s->lost++;
		__atomic_store_n(s->lost_p, s->lost, __ATOMIC_RELEASE);
	}
}

/* Write one whole record (header and timestamp filled in here) in a section
 * of its own. Returns 0 if it could not be written. must waits for room even
 * in drop mode. */
static int write_record(struct hs_slot *s, uint32_t type, uint32_t arg, const uint64_t *body, uint32_t nbody,
                        int must)
{
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, nbody + 2, &nh, must);
	if (!w) {
		section_end(s);
		return 0;
	}
	uint64_t ts = hs_now();
	w[0] = hdr(type, nbody + 2, arg);
	w[1] = ts;
	memcpy(w + 2, body, (size_t)nbody * 8);
	publish(s, nh, ts);
	section_end(s);
	return 1;
}

static void slot_exit(void *arg)
{
	struct hs_slot *s = arg;
	if (s)
		__atomic_store_n(&s->exiting, 1, __ATOMIC_RELEASE);
}

/* A new ring for this process. g_lock held. */
static struct hs_slot *new_slot(void)
{
	size_t total = HS_RING_DATA + (size_t)g_ring_size;
	int fd = memfd_create("heapscope-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return NULL;
	/* sealed at its size: the collector maps it only if it cannot shrink
	 * under it (a read past the end would be a SIGBUS there) */
	if (ftruncate(fd, (off_t)total) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		close(fd);
		return NULL;
	}
	uint8_t *map = sys_mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	struct hs_slot *s = sys_mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED) {
		sys_munmap(map, total);
		close(fd);
		return NULL;
	}
	*(uint32_t *)(map + HS_RING_MAGIC) = HS_MAGIC;
	*(uint32_t *)(map + HS_RING_SIZE) = g_ring_size;
	s->map = map;
	s->data = map + HS_RING_DATA;
	s->head_p = (volatile uint64_t *)(map + HS_RING_HEAD);
	s->seq_p = (volatile uint64_t *)(map + HS_RING_SEQ);
	s->last_ts_p = (volatile uint64_t *)(map + HS_RING_LAST_TS);
	s->lost_p = (volatile uint64_t *)(map + HS_RING_LOST);
	s->tail_p = (volatile uint64_t *)(map + HS_RING_TAIL);
	s->waiting_p = (volatile uint32_t *)(map + HS_RING_WAITING);
	s->size = g_ring_size;
	s->mask = g_ring_size - 1;
	s->half = g_ring_size / 2;
	s->index = g_nslots;
	s->cache_epoch = __atomic_load_n(&g_dl_epoch, __ATOMIC_RELAXED);

	int ok = sock_ok() && send_fd(HS_MSG_RING, s->index, fd);
	if (!ok) {
		/* The program closed our socket: reconnect as the same image. */
		if (g_sock >= 0 && !sock_ok())
			g_sock = -1; /* not ours any more; never close it */
		else if (g_sock >= 0)
			close(g_sock), g_sock = -1;
		ok = connect_locked(1) && send_fd(HS_MSG_RING, s->index, fd);
	}
	close(fd);
	if (!ok) {
		sys_munmap(map, total);
		sys_munmap(s, sizeof *s);
		return NULL;
	}
	g_nslots++;
	s->next = g_slots;
	g_slots = s;
	return s;
}

/*
 * A thread's stack bounds, found without calling into the C library: a
 * thread's first heap call may come from inside a C library function that
 * holds a lock the library would take again (glibc's pthread_getattr_np
 * holds the thread's lock while it reallocs its cpuset, and HotSpot and
 * ripgrep call it at every thread's start), so the bounds are the mapping
 * that holds the stack pointer, asked of the kernel with raw system calls:
 * PROCMAP_QUERY on /proc/self/maps (Linux 6.11), else a parse of that file
 * into a buffer on the stack. Nothing is allocated and no lock is taken.
 * Walks read only inside the bounds, so they need to be readable, not
 * tight: a glibc thread stack's mapping also holds its TLS and thread
 * descriptor above the stack, and its guard page is a mapping of its own.
 */
struct hs_procmap_query { /* struct procmap_query, linux/fs.h */
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define HS_PROCMAP_QUERY 0xC0686611UL /* _IOWR('f', 17, struct procmap_query) */

/* The line of /proc/self/maps (read from fd) whose range holds addr. */
static int maps_find(int fd, uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
	char buf[2048];
	uint64_t v[2] = {0, 0};
	int field = 0; /* 0: start, 1: end, 2: the rest of the line */
	for (;;) {
		long n = syscall(SYS_read, fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		for (long i = 0; i < n; i++) {
			char c = buf[i];
			if (c == '\n') {
				if (field == 2 && v[0] <= addr && addr < v[1]) {
					*lo = v[0];
					*hi = v[1];
					return 1;
				}
				v[0] = v[1] = 0;
				field = 0;
			} else if (field < 2) {
				int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
				if (d >= 0)
					v[field] = v[field] << 4 | (uint64_t)d;
				else
					field = c == '-' && field == 0 ? 1 : 2;
			}
		}
	}
}

/* The mapping that holds addr: [*lo, *hi). */
static int mapping_of(uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct hs_procmap_query q;
	memset(&q, 0, sizeof q);
	q.size = sizeof q;
	q.query_addr = addr;
	int ok;
	if (syscall(SYS_ioctl, fd, HS_PROCMAP_QUERY, &q) == 0 && q.vma_start <= addr && addr < q.vma_end) {
		*lo = q.vma_start;
		*hi = q.vma_end;
		ok = 1;
	} else {
		ok = maps_find(fd, addr, lo, hi); /* an older kernel */
	}
	syscall(SYS_close, fd);
	return ok;
}

/*
 * The bounds of the stack this thread runs on. The main thread's stack
 * grows down to its rlimit, so its low bound is the limit's, not the
 * mapping's current start. On a signal stack (sigaltstack) the thread's
 * own stack is not known: stack_retry asks again at a later call.
 */
static void stack_bounds(struct hs_tls *t)
{
	int saved_errno = errno;
	t->stack_lo = t->stack_hi = 0;
	t->stack_retry = 0;
	stack_t ss;
	if (syscall(SYS_sigaltstack, NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK)) {
		t->stack_retry = 1;
		errno = saved_errno;
		return;
	}
	uintptr_t sp = HS_FRAME(), end = (uintptr_t)__libc_stack_end, lo, hi;
	struct rlimit rl;
	uintptr_t lim = 8u << 20;
	if (syscall(SYS_getrlimit, RLIMIT_STACK, &rl) == 0)
		lim = rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 30) ? rl.rlim_cur : 1u << 30;
	if (mapping_of(sp, &lo, &hi)) {
		if (end >= lo && end < hi) /* the main thread's */
			lo = hi > lim ? hi - lim : 0;
	} else if (sp < end && end - sp < lim) {
		/* no /proc: the main thread's stack is still known */
		hi = (end + 4095) & ~(uintptr_t)4095;
		lo = hi > lim ? hi - lim : 0;
	} else {
		lo = hi = 0; /* walks stop at our own frame */
	}
	t->stack_lo = lo;
	t->stack_hi = hi;
	errno = saved_errno;
}

/*
 * Wait until the collector merges the new ring s (see HS_RING_MERGED).
 * Returns 0 if it refused the ring or is gone; after two seconds without an
 * answer, 1: the ring is used anyway.
 */
static HS_NOINLINE int wait_merged(struct hs_slot *s)
{
	volatile uint32_t *m = (volatile uint32_t *)(s->map + HS_RING_MERGED);
	for (int i = 1; i <= 2000; i++) {
		uint32_t v = __atomic_load_n(m, __ATOMIC_ACQUIRE);
		if (v != 0)
			return v == 1;
		if (closed())
			return 0;
		struct timespec ts = {0, 1000 * 1000};
		futex(m, FUTEX_WAIT, 0, &ts);
		if (i % 100 == 0 && collector_gone())
			return 0;
	}
	return 1;
}

/* Give this thread a ring: a dead thread's, or a new one. in_hook set.
 * Cancellation is off meanwhile: sendmsg and recv are cancellation points,
 * and a thread cancelled there would leave g_lock held. */
static HS_NOINLINE struct hs_slot *attach(struct hs_tls *t, struct hs_slot *old)
{
	if (__atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) == MODE_OFF)
		return NULL;
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&g_lock);
	struct hs_slot *s = NULL;
	int fresh = 0;
	if (g_stale)
		stale_sweep(old);
	if (ensure_connected_locked()) {
		for (struct hs_slot *c = g_slots; c; c = c->next) {
			if (__atomic_load_n(&c->exiting, __ATOMIC_ACQUIRE) && syscall(SYS_tgkill, g_pid, c->tid, 0) < 0 &&
			    errno == ESRCH) {
				s = c;
				break;
			}
		}
		if (!s)
			fresh = (s = new_slot()) != NULL;
		if (s) {
			s->tid = gettid();
			s->exiting = 0;
		}
	}
	pthread_mutex_unlock(&g_lock);
	if (fresh && !wait_merged(s)) {
		/* the collector is done with this process: the ring stays ours,
		 * unused, so that no later call sends another */
		pthread_setcancelstate(cancel, NULL);
		turn_off();
		return NULL;
	}
	pthread_setcancelstate(cancel, NULL);
	if (!s)
		return NULL;
	stack_bounds(t); /* no C library call: see stack_bounds */
	/* must: in drop mode too, or the collector would credit this thread's
	 * events to the ring's previous owner. Written before the ring is the
	 * thread's, so that no signal handler's call goes before it. */
	if (!write_record(s, HS_REC_THREAD, (uint32_t)s->tid, NULL, 0, 1))
		return NULL;
	t->slot = s;
	t->gen = g_gen;
	if (g_atfork_done)
		IN_LIB(pthread_setspecific(g_key, s));
	return s;
}

#endif
