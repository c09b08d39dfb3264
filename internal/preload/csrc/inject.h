/*
 * inject.h: the library in a process that was already running
 * (heapscope attach --inject). internal/inject loads it with dlopen from a
 * thread it stopped at a safe point, and calls the entry points below
 * there (see protocol.h). Nothing is preloaded and nothing is in the
 * environment: the constructor only resolves the real functions
 * (RTLD_DEFAULT, boot.h), and a session is
 *   open:  a socketpair, one end for the collector (the injector takes it
 *          with pidfd_getfd), so that no path, user or namespace stands
 *          between them and no one else can connect;
 *   start: the handshake on the other end, as a launched process's; the
 *          GOT entries redirected (got.h); the watcher thread;
 *   stop:  the entries put back, the rings unmapped, the socket closed,
 *          with every other thread stopped outside the library.
 * The library is never unloaded (a thread may still be returning through a
 * wrapper, and function pointers the program took meanwhile name them); a
 * later session finds it loaded and starts again.
 *
 * The watcher thread is a session's, and leaves with it: it redirects the
 * entries of modules loaded later (dlopen wakes it), and if the collector
 * goes away without a stop (heapscope killed) or the session closes, it
 * puts the entries back and turns recording off, so that the program runs
 * on at its own speed and never waits for a collector that is gone. It
 * holds no lock of the program's and makes no allocation call (it runs in
 * HOOK_LIB).
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_INJECT_H
#define HEAPSCOPE_INJECT_H

#include <poll.h>
#include <sys/prctl.h>

struct hs_inject_state {
	uint32_t magic, version, active;
	int32_t watcher;
	uint32_t entries, sessions;
};
_Static_assert(sizeof(struct hs_inject_state) == HS_INJ_STATE_SIZE, "protocol.h's HS_INJ_STATE_SIZE");
_Static_assert(offsetof(struct hs_inject_state, watcher) == HS_INJ_STATE_WATCHER, "HS_INJ_STATE_WATCHER");
_Static_assert(offsetof(struct hs_inject_state, sessions) == HS_INJ_STATE_SESSIONS, "HS_INJ_STATE_SESSIONS");

HS_EXPORT struct hs_inject_state heapscope_inject_state = {HS_MAGIC, HS_VERSION, 0, 0, 0, 0};

static uint32_t g_inj_wake;    /* futex: bumped to wake the watcher */
static uint32_t g_inj_session; /* bumped by each start and stop: an older session's watcher leaves */
static int64_t g_inj_kicked;   /* when the watcher was last woken by a dlopen */
static int g_inj_sock = -1;    /* our end of the socketpair, from open until start */

static void inj_kick(void)
{
	__atomic_store_n(&g_inj_kicked, mono_ns(), __ATOMIC_RELAXED);
	__atomic_add_fetch(&g_inj_wake, 1, __ATOMIC_RELEASE);
	futex(&g_inj_wake, FUTEX_WAKE, 1, NULL);
}

static void inj_publish(void)
{
	__atomic_store_n(&heapscope_inject_state.entries, g_got_live, __ATOMIC_RELEASE);
}

/* Put the entries back. */
static void inj_restore(void)
{
	pthread_mutex_lock(&g_got_lock);
	got_restore();
	inj_publish();
	pthread_mutex_unlock(&g_got_lock);
}

/*
 * The watcher of session `session`. What it decides it does holding
 * g_got_lock, under which start and stop end a session (g_inj_session):
 * a watcher that finds its session over leaves without touching the next.
 */
static void *inj_watch(void *arg)
{
	uint32_t session = (uint32_t)(uintptr_t)arg;
	tls.in_hook = HOOK_LIB; /* whatever the C library allocates here is ours */
	prctl(PR_SET_NAME, "heapscope", 0, 0, 0);
	__atomic_store_n(&heapscope_inject_state.watcher, (int32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	for (;;) {
		uint32_t w = __atomic_load_n(&g_inj_wake, __ATOMIC_ACQUIRE);
		int gone = g_mode == MODE_OFF || closed() || collector_gone();
		pthread_mutex_lock(&g_got_lock);
		if (__atomic_load_n(&g_inj_session, __ATOMIC_ACQUIRE) != session) {
			pthread_mutex_unlock(&g_got_lock);
			break;
		}
		if (gone) {
			/* without a stop: put everything back, record nothing more */
			turn_off();
			got_restore();
			inj_publish();
			__atomic_store_n(&heapscope_inject_state.active, 0, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&g_got_lock);
			break;
		}
		if (got_changed()) {
			got_scan();
			inj_publish();
		}
		uint32_t pending = g_got_pending;
		pthread_mutex_unlock(&g_got_lock);
		/* soon after a dlopen (and while a module is being loaded), look
		 * every millisecond: its entries are redirected once relocated */
		int eager = pending || mono_ns() - __atomic_load_n(&g_inj_kicked, __ATOMIC_RELAXED) < 100000000;
		struct timespec ts = {0, eager ? 1000000 : 50000000};
		futex(&g_inj_wake, FUTEX_WAIT, w, &ts);
	}
	__atomic_compare_exchange_n(&heapscope_inject_state.watcher, &(int32_t){(int32_t)syscall(SYS_gettid)}, 0, 0,
	                            __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	return NULL;
}

/* Whether a session of a live collector traces the process. */
static int inj_busy(void)
{
	return __atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) == MODE_ON && sock_ok() && !closed() && !collector_gone();
}

HS_EXPORT int heapscope_inject_open(void)
{
	if (!g_injected)
		return -HS_INJ_PRELOADED;
	if (inj_busy())
		return -HS_INJ_BUSY;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return -HS_INJ_SOCKET;
	/* keep out of the way of programs that dup2 onto low descriptors */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= 256) {
		int hi = fcntl(sv[0], F_DUPFD_CLOEXEC, (int)(rl.rlim_cur / 2));
		if (hi >= 0) {
			close(sv[0]);
			sv[0] = hi;
		}
	}
	if (g_inj_sock >= 0)
		close(g_inj_sock); /* an open that no start followed */
	g_inj_sock = sv[0];
	return sv[1];
}

/* Forget the last session: its rings (stale, unmapped as their threads
 * come back), stack ids, modules, control block (kept mapped: a thread may
 * be reading its state) and sampled blocks. g_lock held. */
static void inj_reset_locked(void)
{
	for (struct hs_slot *s = g_slots, *next; s; s = next) {
		next = s->next;
		s->next = g_stale;
		g_stale = s;
	}
	g_slots = NULL;
	g_nslots = 0;
	pthread_mutex_lock(&g_stack_lock);
	stab_reset();
	if (g_mods)
		sys_munmap(g_mods, g_mods_cap * sizeof *g_mods);
	g_mods = NULL;
	g_mods_len = g_mods_cap = 0;
	g_mods_valid = 0;
	g_next_stack_id = 1;
	pthread_mutex_unlock(&g_stack_lock);
	if (g_sock >= 0 && sock_ok())
		close(g_sock);
	g_sock = -1;
	g_ctl = NULL;
	__atomic_store_n(&g_sset, NULL, __ATOMIC_RELEASE);
	g_gen++;
	g_mode = MODE_UNKNOWN;
}

HS_EXPORT int heapscope_inject_start(uint8_t *args)
{
	if (!g_injected)
		return -HS_INJ_PRELOADED;
	uint32_t magic, ver;
	int32_t peer;
	memcpy(&magic, args + HS_INJ_ARG_MAGIC, 4);
	memcpy(&ver, args + HS_INJ_ARG_VERSION, 4);
	memcpy(&peer, args + HS_INJ_ARG_PEER, 4);
	if (magic != HS_MAGIC || ver != HS_VERSION)
		return -HS_INJ_ARGS;
	if (g_inj_sock < 0)
		return -HS_INJ_NOT_OPEN;
	if (inj_busy())
		return -HS_INJ_BUSY;
	/* the injector has its copy of the other end: ours must go, or the
	 * collector's death would never read as EOF here */
	struct stat st;
	if (peer >= 0 && fstat(peer, &st) == 0 && S_ISSOCK(st.st_mode))
		close(peer);
	ensure_reals();
	uint32_t saved = tls.in_hook;
	tls.in_hook = HOOK_LIB;
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	/* an older session's watcher leaves */
	pthread_mutex_lock(&g_got_lock);
	__atomic_add_fetch(&g_inj_session, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&g_got_lock);
	inj_kick();
	pthread_mutex_lock(&g_lock);
	inj_reset_locked();
	int fd = g_inj_sock;
	g_inj_sock = -1;
	int on = hello_locked(fd, 0);
	if (on) {
		g_conn_gen = g_gen;
		__atomic_store_n(&g_mode, MODE_ON, __ATOMIC_RELEASE);
	} else {
		__atomic_store_n(&g_families, 0, __ATOMIC_RELEASE);
		g_mode = MODE_OFF;
	}
	pthread_mutex_unlock(&g_lock);
	int ret = 0;
	if (!on) {
		ret = -HS_INJ_HANDSHAKE;
		goto out;
	}
	if ((g_unwind == HS_UNWIND_DWARF || g_unwind == HS_UNWIND_TABLES) && !p_unw_backtrace)
		load_libunwind();
	__atomic_store_n(&g_unw_prewarm, (g_unwind == HS_UNWIND_DWARF || g_unwind == HS_UNWIND_TABLES) && p_unw_backtrace, __ATOMIC_RELAXED);
	pthread_mutex_lock(&g_got_lock);
	got_scan();
	inj_publish();
	uint32_t n = g_got_live, mods = (uint32_t)g_nseen;
	pthread_mutex_unlock(&g_got_lock);
	memcpy(args + HS_INJ_ARG_ENTRIES, &n, 4);
	memcpy(args + HS_INJ_ARG_MODULES, &mods, 4);
	pthread_attr_t attr;
	pthread_t th;
	int err = pthread_attr_init(&attr);
	if (!err) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 256 * 1024);
		/* the injector's call runs with every signal blocked: so does
		 * the watcher, which inherits the mask */
		err = pthread_create(&th, &attr, inj_watch, (void *)(uintptr_t)__atomic_load_n(&g_inj_session, __ATOMIC_ACQUIRE));
		pthread_attr_destroy(&attr);
	}
	if (err) {
		/* no one to put the entries back if the collector dies: do not
		 * leave them */
		memcpy(args + HS_INJ_ARG_ERRNO, &err, 4);
		turn_off();
		inj_restore();
		ret = -HS_INJ_THREAD;
		goto out;
	}
	__atomic_store_n(&heapscope_inject_state.active, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&heapscope_inject_state.sessions, 1, __ATOMIC_RELEASE);
out:
	pthread_setcancelstate(cancel, NULL);
	tls.in_hook = saved;
	return ret;
}

/*
 * The session ends, in two steps (HS_INJ_STOP_*, args' flags): the entries
 * go back, recording stops and the socket closes; a thread inside a
 * wrapper finishes its call. Then, called with every other thread stopped
 * outside the library (the injector made sure), nothing can be using a
 * ring: they all go.
 */
HS_EXPORT int heapscope_inject_stop(uint8_t *args)
{
	if (!g_injected)
		return -HS_INJ_PRELOADED;
	uint32_t flags;
	memcpy(&flags, args + HS_INJ_ARG_FLAGS, 4);
	uint32_t saved = tls.in_hook;
	tls.in_hook = HOOK_LIB;
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	uint32_t n = 0;
	if (flags & HS_INJ_STOP_RESTORE) {
		turn_off();
		pthread_mutex_lock(&g_got_lock);
		n = got_restore();
		inj_publish();
		__atomic_add_fetch(&g_inj_session, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&g_got_lock);
		inj_kick();
		pthread_mutex_lock(&g_lock);
		if (g_sock >= 0 && sock_ok())
			close(g_sock);
		g_sock = -1;
		pthread_mutex_unlock(&g_lock);
		if (uw_trylock()) {
			uw_drop_channel();
			uw_unlock();
		}
		__atomic_store_n(&heapscope_inject_state.active, 0, __ATOMIC_RELEASE);
	}
	if (flags & HS_INJ_STOP_RELEASE) {
		pthread_mutex_lock(&g_lock);
		g_gen++; /* threads that come back attach anew, and find it off */
		for (struct hs_slot *s = g_slots, *next; s; s = next) {
			next = s->next;
			slot_unmap(s);
		}
		for (struct hs_slot *s = g_stale, *next; s; s = next) {
			next = s->next;
			slot_unmap(s);
		}
		g_slots = g_stale = NULL;
		g_nslots = 0;
		pthread_mutex_unlock(&g_lock);
	}
	memcpy(args + HS_INJ_ARG_ENTRIES, &n, 4);
	pthread_setcancelstate(cancel, NULL);
	tls.in_hook = saved;
	return 0;
}

/* A forked child of an injected process is not traced: the entries are
 * put back in its copy of the memory (it is alone: no lock, no loader
 * list; each write checked by the kernel), and it records nothing. */
static void inj_fork_child(void)
{
	pthread_mutex_init(&g_got_lock, NULL);
	__atomic_store_n(&g_families, 0, __ATOMIC_RELEASE);
	g_mode = MODE_OFF;
	pid_t me = (pid_t)syscall(SYS_getpid);
	for (size_t i = 0; i < g_npatches; i++) {
		struct got_patch *p = &g_patches[i];
		uintptr_t v = 0;
		struct iovec local = {&v, sizeof v}, remote = {(void *)p->slot, sizeof v};
		if (!p->slot || syscall(SYS_process_vm_readv, me, &local, 1, &remote, 1, 0) != (long)sizeof v || v != p->repl)
			continue;
		local.iov_base = &p->orig;
		if (syscall(SYS_process_vm_writev, me, &local, 1, &remote, 1, 0) == (long)sizeof v)
			continue;
		uintptr_t page = p->slot & ~(uintptr_t)4095;
		if (syscall(SYS_mprotect, page, 4096, PROT_READ | PROT_WRITE) == 0) {
			syscall(SYS_process_vm_writev, me, &local, 1, &remote, 1, 0);
			syscall(SYS_mprotect, page, 4096, PROT_READ);
		}
	}
	g_npatches = g_nseen = 0;
	g_got_live = 0;
	heapscope_inject_state.active = 0;
	heapscope_inject_state.watcher = 0;
	heapscope_inject_state.entries = 0;
}

#endif
