/*
 * heapscope_preload.c: the in-process half of heapscope's preload provider.
 *
 * Loaded with LD_PRELOAD, it wraps the allocation functions, records each
 * call (with a de-duplicated call stack for the kinds the session asks for)
 * into a ring of shared memory owned by the calling thread, and lets the Go
 * collector (package preload) read the rings. See protocol.h for the format
 * and ../README.md for what happens to children.
 *
 * Rules this file keeps:
 *  - Nothing here allocates with malloc. Memory comes from mmap; the few libc
 *    calls that may allocate (dlsym, pthread_getattr_np, realpath, dlopen)
 *    run with the thread's in_hook flag set, so that their allocations pass
 *    straight to the real allocator untraced.
 *  - The hot path takes no lock shared between threads: a thread writes only
 *    its own ring. Locks are taken only to attach a thread, to define a new
 *    stack or to connect.
 *  - Every call either reaches the ring or, in drop mode, is counted lost.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "protocol.h"

#define HS_EXPORT __attribute__((visibility("default")))
#define HS_LIKELY(x) __builtin_expect(!!(x), 1)
#define HS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HS_NOINLINE __attribute__((noinline))
#define HS_INLINE inline __attribute__((always_inline))
#define HS_FRAME() ((uintptr_t)__builtin_frame_address(0))

extern char **environ;
extern void *__libc_stack_end;

/* ---- the real functions ------------------------------------------------ */

static struct {
	void (*free)(void *);
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	void *(*mmap)(void *, size_t, int, int, int, off_t);
	void *(*mmap64)(void *, size_t, int, int, int, off_t);
	int (*munmap)(void *, size_t);
	void *(*mremap)(void *, size_t, size_t, int, ...);
	int (*dlclose)(void *);
	void *(*dlopen)(const char *, int);
} real;

/*
 * What a thread is doing, as seen by an allocation call that arrives
 * while it is not done (in_hook):
 *  HOOK_REAL: running a real function for the program (reallocarray,
 *    posix_memalign, ...): a nested call is part of it, not recorded.
 *  HOOK_LIB: our bookkeeping, inside a C library call that may allocate
 *    (dlsym, pthread_getattr_np, libunwind's first walk, ...): a nested
 *    call is ours: not recorded, and the blocks it returns are internal
 *    (their frees, whenever they come, are dropped too).
 *  HOOK_BUSY: our bookkeeping, calling nothing that allocates: a call can
 *    only come from a signal handler that interrupted us. It is queued
 *    (with its stack) and written when the interrupted hook is done.
 */
enum { HOOK_NONE, HOOK_REAL, HOOK_BUSY, HOOK_LIB };

/* A call made by a signal handler while this thread was in HOOK_BUSY. */
#define HS_PEND 4
struct hs_pend {
	uint32_t func, kind, nbody, nframes;
	uint64_t ts, a, b, c, d;
	uint64_t frames[HS_MAX_FRAMES];
};

/* Per-thread state. Initial-exec TLS: one %fs-relative access. */
struct hs_slot;
struct hs_tls {
	uint32_t in_hook;   /* HOOK_*: inside a call of ours */
	uint32_t gen;       /* g_gen when slot was attached */
	uint32_t resolving; /* this thread is resolving the real functions */
	uint32_t swallow;   /* in a real C++ operator: its own malloc or free is not recorded */
	struct hs_slot *slot;
	uintptr_t stack_lo, stack_hi;
	uint32_t unw_warm;  /* libunwind walked this thread once (its TLS is allocated) */
	uint32_t safe_point; /* waiting for room in a section: a signal handler's call
	                      * may write to the ring itself */
	uint32_t stack_locked; /* holds g_stack_lock */
	uint32_t npend;     /* calls queued by signal handlers (may exceed HS_PEND) */
	uint32_t pdone;     /* of which written */
	uint32_t pend_lost; /* queued calls that did not fit */
	struct hs_pend pend[HS_PEND];
};
static __thread struct hs_tls tls __attribute__((tls_model("initial-exec")));

/*
 * Run a C library call that may allocate from inside our bookkeeping. Its
 * allocations are ours (never shown), so a signal handler's call in that
 * window could be told from them by nothing: asynchronous signals are held
 * until it returns (two system calls; every use is rare: once per thread or
 * per module). Faults still arrive.
 */
static void lib_block(uint64_t *old)
{
	uint64_t all = ~(uint64_t)0;
	all &= ~((1ull << (SIGSEGV - 1)) | (1ull << (SIGBUS - 1)) | (1ull << (SIGILL - 1)) | (1ull << (SIGFPE - 1)) |
	         (1ull << (SIGTRAP - 1)) | (1ull << (SIGABRT - 1)));
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, old, sizeof all) != 0)
		*old = ~(uint64_t)0; /* nothing to restore */
}

static void lib_unblock(const uint64_t *old)
{
	if (*old != ~(uint64_t)0)
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, sizeof *old);
}

#define IN_LIB(stmt)                                                                                                   \
	do {                                                                                                           \
		uint64_t _saved_mask;                                                                                  \
		lib_block(&_saved_mask);                                                                               \
		uint32_t _saved_hook = tls.in_hook;                                                                    \
		tls.in_hook = HOOK_LIB;                                                                                \
		stmt;                                                                                                  \
		tls.in_hook = _saved_hook;                                                                             \
		lib_unblock(&_saved_mask);                                                                             \
	} while (0)

#include "sample.h"

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

static int reals_state; /* 0: unresolved, 1: resolving, 2: resolved */

static void resolve_reals(void)
{
	int expect = 0;
	if (__atomic_compare_exchange_n(&reals_state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		tls.resolving = 1;
		/* free first: dlsym may free what it allocated while resolving the rest. */
		real.free = dlsym(RTLD_NEXT, "free");
		real.malloc = dlsym(RTLD_NEXT, "malloc");
		real.calloc = dlsym(RTLD_NEXT, "calloc");
		real.realloc = dlsym(RTLD_NEXT, "realloc");
		real.reallocarray = dlsym(RTLD_NEXT, "reallocarray");
		real.posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
		real.aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
		real.memalign = dlsym(RTLD_NEXT, "memalign");
		real.valloc = dlsym(RTLD_NEXT, "valloc");
		real.pvalloc = dlsym(RTLD_NEXT, "pvalloc");
		real.mmap = dlsym(RTLD_NEXT, "mmap");
		real.mmap64 = dlsym(RTLD_NEXT, "mmap64");
		real.munmap = dlsym(RTLD_NEXT, "munmap");
		real.mremap = dlsym(RTLD_NEXT, "mremap");
		real.dlclose = dlsym(RTLD_NEXT, "dlclose");
		real.dlopen = dlsym(RTLD_NEXT, "dlopen");
		tls.resolving = 0;
		__atomic_store_n(&reals_state, 2, __ATOMIC_RELEASE);
		return;
	}
	if (tls.resolving)
		return; /* dlsym calling back into us: the caller uses the arena */
	while (__atomic_load_n(&reals_state, __ATOMIC_ACQUIRE) != 2)
		sched_yield();
}

/* ---- session state ------------------------------------------------------ */

enum { MODE_UNKNOWN, MODE_ON, MODE_OFF };

static int g_mode;              /* MODE_* */
static uint32_t g_families = ~0u; /* traced families; all until known, 0 when off */
static uint32_t g_gen = 1;      /* bumped in a forked child: every slot is stale */
static uint32_t g_conn_gen;     /* g_gen of the current connection */
static uint8_t *g_ctl;          /* the control block */
static volatile uint32_t *g_state; /* HS_CTL_STATE in it */
static uint32_t g_clock = HS_CLOCK_TSC, g_unwind, g_max_frames = 64, g_on_full, g_ring_size;
static int g_sock = -1;
static ino_t g_sock_ino;
static pid_t g_pid;
static int g_atfork_done;
static pthread_key_t g_key;
/* A page the kernel zeroes in a forked child (MADV_WIPEONFORK): a child
 * notices the fork at its first call, even one made by an atfork handler
 * that runs before ours, or after a fork that runs none (_Fork, clone). */
static volatile uint32_t *g_forkcheck;
static uint64_t g_heartbeat_seen;
static int64_t g_heartbeat_at;
static char g_exe[PATH_MAX];
static uint32_t g_dl_epoch; /* bumped by dlclose: cached stacks may name unloaded code */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;       /* connection, slots */
static pthread_mutex_t g_stack_lock = PTHREAD_MUTEX_INITIALIZER; /* stack table, modules */

/* the collector's clock */
static inline uint64_t hs_now(void)
{
	if (HS_LIKELY(g_clock == HS_CLOCK_TSC)) {
		/* lfence: the timestamp is taken after every earlier load completed,
		 * so a free seen after the malloc it frees is stamped later. */
		_mm_lfence();
		return __rdtsc();
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long futex(volatile uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

/* The library's own mappings: system calls, never our exported wrappers,
 * which would record them (in a forked child being reset, into the parent's
 * ring). */
static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static int sys_munmap(void *addr, size_t len)
{
	return (int)syscall(SYS_munmap, addr, len);
}

static void *sys_mremap(void *old, size_t old_len, size_t len, int flags)
{
	return (void *)syscall(SYS_mremap, old, old_len, len, flags, NULL);
}

/*
 * The live blocks allocated for our own use (in HOOK_LIB): a lock-free
 * open-addressing set, so that their frees, which the C library may make
 * much later outside any hook (libunwind's thread-local data when a thread
 * ends), are dropped instead of showing as frees of unknown blocks.
 */
#define HS_INTERNAL_CAP 16384 /* a power of two */
#define HS_INTERNAL_PROBE 64
#define HS_INTERNAL_GONE 1 /* a removed entry */
static uintptr_t *g_internal;
static uint32_t g_internal_n; /* blocks in the set: frees look only when not 0 */

static inline size_t internal_slot(uintptr_t a)
{
	return (size_t)(((uint64_t)a >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (HS_INTERNAL_CAP - 1);
}

static void internal_add(uintptr_t a)
{
	uintptr_t *tab = __atomic_load_n(&g_internal, __ATOMIC_ACQUIRE);
	if (!tab) {
		uintptr_t *n = sys_mmap(NULL, HS_INTERNAL_CAP * sizeof *n, PROT_READ | PROT_WRITE,
		                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (n == MAP_FAILED)
			return;
		if (__atomic_compare_exchange_n(&g_internal, &tab, n, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			tab = n;
		else
			sys_munmap(n, HS_INTERNAL_CAP * sizeof *n);
	}
	size_t j = internal_slot(a);
	for (int i = 0; i < HS_INTERNAL_PROBE; i++, j = (j + 1) & (HS_INTERNAL_CAP - 1)) {
		uintptr_t cur = __atomic_load_n(&tab[j], __ATOMIC_RELAXED);
		if ((cur == 0 || cur == HS_INTERNAL_GONE) &&
		    __atomic_compare_exchange_n(&tab[j], &cur, a, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_add_fetch(&g_internal_n, 1, __ATOMIC_RELEASE);
			return;
		}
	}
}

/* Removes a from the set; 1 if it was there. */
static int internal_del(uintptr_t a)
{
	uintptr_t *tab = __atomic_load_n(&g_internal, __ATOMIC_ACQUIRE);
	if (!tab || a <= HS_INTERNAL_GONE)
		return 0;
	size_t j = internal_slot(a);
	for (int i = 0; i < HS_INTERNAL_PROBE; i++, j = (j + 1) & (HS_INTERNAL_CAP - 1)) {
		uintptr_t cur = __atomic_load_n(&tab[j], __ATOMIC_ACQUIRE);
		if (cur == 0)
			return 0;
		if (cur != a)
			continue;
		/* the end of a probe run becomes empty again, not a tombstone */
		uintptr_t next = __atomic_load_n(&tab[(j + 1) & (HS_INTERNAL_CAP - 1)], __ATOMIC_RELAXED);
		if (!__atomic_compare_exchange_n(&tab[j], &cur, next == 0 ? 0 : HS_INTERNAL_GONE, 0, __ATOMIC_ACQ_REL,
		                                 __ATOMIC_RELAXED))
			return 0;
		__atomic_sub_fetch(&g_internal_n, 1, __ATOMIC_RELEASE);
		return 1;
	}
	return 0;
}

static inline int internal_any(void)
{
	return __atomic_load_n(&g_internal_n, __ATOMIC_RELAXED) != 0;
}

static inline volatile uint32_t *ctl32(int off) { return (volatile uint32_t *)(g_ctl + off); }
static inline volatile uint64_t *ctl64(int off) { return (volatile uint64_t *)(g_ctl + off); }

/* ---- environment -------------------------------------------------------- */

/*
 * Remove our variables, and this library from LD_PRELOAD, from environ, so
 * that programs this process starts are not traced once the session is gone.
 * Done in place, without allocating, like unsetenv.
 */
static char g_preload_env[8192];

static int token_is(const char *tok, size_t n, const char *lib)
{
	if (!lib || !*lib)
		return 0;
	if (strlen(lib) == n && memcmp(tok, lib, n) == 0)
		return 1;
	/* a bare file name also names us */
	const char *base = strrchr(lib, '/');
	return base && strlen(base + 1) == n && memcmp(tok, base + 1, n) == 0;
}

static void scrub_env(void)
{
	static char lib[PATH_MAX];
	const char *l = getenv(HS_ENV_LIB);
	if (l && strlen(l) < sizeof lib)
		strcpy(lib, l);
	else {
		Dl_info di;
		if (dladdr((void *)scrub_env, &di) && di.dli_fname && strlen(di.dli_fname) < sizeof lib)
			strcpy(lib, di.dli_fname);
	}
	char **env = environ;
	if (!env)
		return;
	size_t j = 0;
	for (size_t i = 0; env[i]; i++) {
		char *e = env[i];
		if (strncmp(e, HS_ENV_PREFIX, sizeof HS_ENV_PREFIX - 1) == 0)
			continue;
		if (strncmp(e, "LD_PRELOAD=", 11) == 0) {
			const char *v = e + 11;
			size_t out = 0;
			int dropped = 0;
			memcpy(g_preload_env, "LD_PRELOAD=", 11);
			out = 11;
			while (*v) {
				size_t n = strcspn(v, " :");
				if (n > 0) {
					if (token_is(v, n, lib)) {
						dropped = 1;
					} else if (out + n + 2 < sizeof g_preload_env) {
						if (out > 11)
							g_preload_env[out++] = ' ';
						memcpy(g_preload_env + out, v, n);
						out += n;
					}
				}
				v += n;
				if (*v)
					v++;
			}
			g_preload_env[out] = 0;
			if (dropped) {
				if (out == 11)
					continue;
				e = g_preload_env;
			}
		}
		env[j++] = e;
	}
	env[j] = NULL;
}

static void turn_off(void)
{
	if (__atomic_exchange_n(&g_mode, MODE_OFF, __ATOMIC_ACQ_REL) == MODE_OFF)
		return;
	__atomic_store_n(&g_families, 0, __ATOMIC_RELEASE);
	scrub_env();
}

/* ---- connection --------------------------------------------------------- */

static char g_msg[HS_HELLO_MAX] __attribute__((aligned(8)));

static ssize_t read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	return (ssize_t)got;
}

static int sock_ok(void)
{
	struct stat st;
	return g_sock >= 0 && fstat(g_sock, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == g_sock_ino;
}

static int send_fd(uint32_t type, uint32_t index, int fd)
{
	struct hs_ring_msg m = {HS_MAGIC, HS_VERSION, type, index};
	struct iovec iov = {&m, sizeof m};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	memset(&c, 0, sizeof c);
	struct msghdr mh = {0};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = c.buf;
	mh.msg_controllen = sizeof c.buf;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	for (;;) {
		ssize_t r = sendmsg(g_sock, &mh, MSG_NOSIGNAL);
		if (r == (ssize_t)sizeof m)
			return 1;
		if (r < 0 && errno == EINTR)
			continue;
		return 0;
	}
}

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);
static void slot_exit(void *);

/* Whether uid may run our collector: the one heapscope ran as, or root. */
static int trusted_uid(uid_t uid, uid_t want)
{
	return uid == want || uid == 0;
}

/*
 * Whether path names a socket we may connect to: its directory and the
 * socket itself (neither followed if a symlink) are owned by want (or
 * root) and writable by no one else. A session that ended leaves its name
 * free for anyone to recreate in /tmp; the peer's credentials, checked
 * after connecting, close the race between this check and the connect.
 */
static int socket_path_ok(const char *path, uid_t want)
{
	static char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path || (size_t)(slash - path) >= sizeof dir)
		return 0;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = 0;
	struct stat st;
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || !trusted_uid(st.st_uid, want) || (st.st_mode & 022))
		return 0;
	if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode) || !trusted_uid(st.st_uid, want) || (st.st_mode & 022))
		return 0;
	return 1;
}

/* The collector's uid, from the environment; -1 if absent or malformed. */
static long env_uid(void)
{
	const char *v = getenv(HS_ENV_UID);
	if (!v || !*v)
		return -1;
	long u = 0;
	for (; *v; v++) {
		if (*v < '0' || *v > '9' || u > 0xffffffffL / 10)
			return -1;
		u = u * 10 + (*v - '0');
	}
	return u <= 0xfffffffeL ? u : -1;
}

/*
 * Connect to the collector and say hello. cont says this image was already
 * traced (the program closed our socket). Called with g_lock held and
 * in_hook set. Returns 1 when tracing.
 */
static int connect_locked(int cont)
{
	const char *path = getenv(HS_ENV_SOCKET);
	long uid = env_uid();
	if (!path || !*path || uid < 0 || !socket_path_ok(path, (uid_t)uid))
		return 0;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sa.sun_path)
		return 0;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return 0;
	/* Non-blocking: a listener whose backlog is full (one that never
	 * accepts) makes connect fail with EAGAIN instead of blocking. A few
	 * retries, then run untraced. */
	int r0;
	for (int tries = 0;; tries++) {
		r0 = connect(fd, (struct sockaddr *)&sa, sizeof sa);
		if (r0 == 0 || (errno != EAGAIN && errno != EINTR) || tries >= 100)
			break;
		struct timespec pause = {0, 10 * 1000 * 1000};
		nanosleep(&pause, NULL);
	}
	struct ucred cred;
	socklen_t clen = sizeof cred;
	if (r0 < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || clen != sizeof cred ||
	    !trusted_uid(cred.uid, (uid_t)uid) || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		close(fd);
		return 0;
	}
	/* Keep out of the way of programs that dup2 onto low descriptors. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= 256) {
		int hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)(rl.rlim_cur / 2));
		if (hi >= 0) {
			close(fd);
			fd = hi;
		}
	}
	/* bounds the handshake with a collector that does not answer */
	struct timeval tv = {5, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

	struct hs_hello *h = (struct hs_hello *)g_msg;
	memset(h, 0, sizeof *h);
	h->magic = HS_MAGIC;
	h->version = HS_VERSION;
	h->type = HS_MSG_HELLO;
	h->flags = cont ? HS_HELLO_CONTINUE : 0;
	h->pid = (uint32_t)getpid();
	h->ppid = (uint32_t)getppid();
	h->mono_ns = mono_ns();
	size_t off = HS_HELLO_SIZE;
	ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
	g_exe[n > 0 ? n : 0] = 0;
	size_t el = strlen(g_exe);
	memcpy(g_msg + off, g_exe, el);
	h->exe_len = (uint32_t)el;
	off += el;
	size_t room = sizeof g_msg - off;
	ssize_t cl = read_file("/proc/self/cmdline", g_msg + off, room);
	if (cl < 0)
		cl = 0;
	if ((size_t)cl == room)
		h->flags |= HS_HELLO_TRUNCATED;
	h->cmdline_len = (uint32_t)cl;
	off += (size_t)cl;
	if (send(fd, g_msg, off, MSG_NOSIGNAL) != (ssize_t)off) {
		close(fd);
		return 0;
	}

	struct hs_welcome w;
	struct iovec iov = {&w, sizeof w};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	struct msghdr mh = {0};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = c.buf;
	mh.msg_controllen = sizeof c.buf;
	ssize_t r;
	do
		r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	int cfd = -1;
	struct cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&cfd, CMSG_DATA(cm), sizeof cfd);
	if (r != (ssize_t)sizeof w || w.magic != HS_MAGIC || w.version != HS_VERSION ||
	    w.type != HS_MSG_WELCOME || w.status != 0 || cfd < 0) {
		if (cfd >= 0)
			close(cfd);
		close(fd);
		return 0;
	}
	if (!g_ctl) {
		void *m = sys_mmap(NULL, HS_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
		if (m == MAP_FAILED) {
			close(cfd);
			close(fd);
			return 0;
		}
		uint8_t *ctl = m;
		uint32_t ring = *(uint32_t *)(ctl + HS_CTL_RING_SIZE);
		uint32_t mf = *(uint32_t *)(ctl + HS_CTL_MAX_FRAMES);
		if (*(uint32_t *)(ctl + HS_CTL_MAGIC) != HS_MAGIC || ring < HS_RING_MIN || ring > HS_RING_MAX ||
		    (ring & (ring - 1)) || mf < 1 || mf > HS_MAX_FRAMES) {
			sys_munmap(m, HS_CTL_SIZE);
			close(cfd);
			close(fd);
			return 0;
		}
		g_clock = *(uint32_t *)(ctl + HS_CTL_CLOCK);
		g_unwind = *(uint32_t *)(ctl + HS_CTL_UNWIND);
		g_max_frames = mf;
		g_on_full = *(uint32_t *)(ctl + HS_CTL_ON_FULL);
		g_ring_size = ring;
		g_state = (volatile uint32_t *)(ctl + HS_CTL_STATE);
		__atomic_store_n(&g_families, *(uint32_t *)(ctl + HS_CTL_FAMILIES), __ATOMIC_RELEASE);
		sample_configure(ctl);
		__atomic_store_n(&g_ctl, ctl, __ATOMIC_RELEASE);
	}
	close(cfd);
	struct stat st;
	fstat(fd, &st);
	g_sock = fd;
	g_sock_ino = st.st_ino;
	g_pid = getpid();
	g_heartbeat_seen = *ctl64(HS_CTL_HEARTBEAT);
	g_heartbeat_at = mono_ns();
	if (!g_atfork_done) {
		g_atfork_done = 1;
		void *page = sys_mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (page != MAP_FAILED && madvise(page, 4096, MADV_WIPEONFORK) == 0) {
			*(volatile uint32_t *)page = 1;
			g_forkcheck = page;
		}
		IN_LIB(pthread_atfork(atfork_prepare, atfork_parent, atfork_child));
		IN_LIB(pthread_key_create(&g_key, slot_exit));
	}
	return 1;
}

/* Make sure this image is connected. Called with g_lock held, in_hook set. */
static int ensure_connected_locked(void)
{
	if (g_mode == MODE_OFF)
		return 0;
	if (g_mode == MODE_ON && g_conn_gen == g_gen)
		return 1;
	if (!connect_locked(0)) {
		turn_off();
		return 0;
	}
	g_conn_gen = g_gen;
	__atomic_store_n(&g_mode, MODE_ON, __ATOMIC_RELEASE);
	return 1;
}

/* The collector is gone when our socket reads EOF or, if the program closed
 * the socket, when its heartbeat stopped for five seconds. */
static int collector_gone(void)
{
	if (sock_ok()) {
		char b;
		int cancel;
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
		ssize_t r = recv(g_sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		int err = errno;
		pthread_setcancelstate(cancel, NULL);
		if (r == 0)
			return 1;
		if (r < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
			return 1;
		return 0;
	}
	uint64_t hb = *ctl64(HS_CTL_HEARTBEAT);
	int64_t now = mono_ns();
	if (hb != g_heartbeat_seen) {
		g_heartbeat_seen = hb;
		g_heartbeat_at = now;
		return 0;
	}
	return now - g_heartbeat_at > 5000000000LL;
}

/* ---- rings -------------------------------------------------------------- */

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
		if (g_on_full == HS_ON_FULL_DROP && !must)
			return 0;
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

static void stack_bounds(struct hs_tls *t)
{
	pid_t tid = gettid();
	t->stack_lo = t->stack_hi = 0;
	if (tid == getpid()) {
		uintptr_t end = (uintptr_t)__libc_stack_end;
		uintptr_t hi = (end + 4095) & ~(uintptr_t)4095;
		struct rlimit rl;
		uintptr_t lim = 8u << 20;
		if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 30))
			lim = rl.rlim_cur;
		else if (getrlimit(RLIMIT_STACK, &rl) == 0)
			lim = 1u << 30;
		t->stack_hi = hi;
		t->stack_lo = hi > lim ? hi - lim : 0;
		return;
	}
	pthread_attr_t a;
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		void *addr;
		size_t size;
		if (pthread_attr_getstack(&a, &addr, &size) == 0) {
			t->stack_lo = (uintptr_t)addr;
			t->stack_hi = (uintptr_t)addr + size;
		}
		pthread_attr_destroy(&a);
	}
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
static HS_NOINLINE struct hs_slot *attach(struct hs_tls *t)
{
	if (__atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) == MODE_OFF)
		return NULL;
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&g_lock);
	struct hs_slot *s = NULL;
	int fresh = 0;
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
	IN_LIB(stack_bounds(t));
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

/* ---- stacks ------------------------------------------------------------- */

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

struct mod_scan {
	struct hs_slot *slot;
	struct hs_mod *next; /* the new module set */
	size_t len, cap;
	int failed;
};

static uint64_t g_modrec[(48 + HS_MODULE_PATH_MAX + HS_BUILD_ID_MAX) / 8 + 2];
static char g_path[PATH_MAX];

static int mod_known(uint64_t start, uint64_t end, uint64_t ph)
{
	for (size_t i = 0; i < g_mods_len; i++)
		if (g_mods[i].start == start && g_mods[i].end == end && g_mods[i].path_hash == ph)
			return 1;
	return 0;
}

static int mod_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct mod_scan *sc = arg;
	const char *name = info->dlpi_name;
	if (!name || !*name)
		name = g_exe;
	else if (name[0] != '/' && strchr(name, '/')) {
		char *rp;
		IN_LIB(rp = realpath(name, g_path));
		if (rp)
			name = g_path;
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
		uint64_t start = info->dlpi_addr + p->p_vaddr, end = start + p->p_memsz;
		if (sc->len == sc->cap) {
			size_t cap = sc->cap ? sc->cap * 2 : 256;
			struct hs_mod *n = map_anon(cap * sizeof *n);
			if (!n) {
				sc->failed = 1;
				return 1;
			}
			if (sc->next) {
				memcpy(n, sc->next, sc->len * sizeof *n);
				sys_munmap(sc->next, sc->cap * sizeof *n);
			}
			sc->next = n;
			sc->cap = cap;
		}
		sc->next[sc->len++] = (struct hs_mod){start, end, ph};
		if (mod_known(start, end, ph))
			continue;
		if (idlen == (size_t)-1)
			idlen = build_id(info, id);
		uint64_t *w = g_modrec;
		w[0] = start;
		w[1] = end;
		w[2] = p->p_offset;
		w[3] = (uint64_t)plen | ((uint64_t)idlen << 32);
		size_t bytes = plen + idlen;
		memset(w + 4, 0, (bytes + 7) & ~(size_t)7);
		memcpy((char *)(w + 4), name, plen);
		memcpy((char *)(w + 4) + plen, id, idlen);
		if (!write_record(sc->slot, HS_REC_MODULE, 0, w, 4 + (uint32_t)((bytes + 7) / 8), 0)) {
			sc->failed = 1;
			return 1;
		}
	}
	return 0;
}

static int cmp_mod(const void *a, const void *b)
{
	const struct hs_mod *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Report the executable segments of every loaded object not yet reported,
 * and make them the module set. g_stack_lock held. */
static int refresh_modules(struct hs_slot *s)
{
	struct mod_scan sc = {s, NULL, 0, 0, 0};
	dl_iterate_phdr(mod_cb, &sc);
	if (sc.failed) {
		if (sc.next)
			sys_munmap(sc.next, sc.cap * sizeof *sc.next);
		g_mods_valid = 0;
		return 0;
	}
	/* insertion order is load order: sort by address for lookups */
	for (size_t i = 1; i < sc.len; i++)
		for (size_t j = i; j > 0 && cmp_mod(&sc.next[j - 1], &sc.next[j]) > 0; j--) {
			struct hs_mod t = sc.next[j];
			sc.next[j] = sc.next[j - 1];
			sc.next[j - 1] = t;
		}
	if (g_mods)
		sys_munmap(g_mods, g_mods_cap * sizeof *g_mods);
	g_mods = sc.next;
	g_mods_len = sc.len;
	g_mods_cap = sc.cap;
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
		ok = refresh_modules(s);
		m = 0;
		while (m < n && mod_covers(f[m]))
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

/* ---- table-driven unwinding (--unwind tables) --------------------------- */

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
	dl_iterate_phdr(uw_scan_cb, &sc); /* only the counters: one callback */
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
	dl_iterate_phdr(uw_scan_cb, &sc);
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
	dl_iterate_phdr(uw_scan_cb, &sc);
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
		struct iovec iov = {&m, sizeof m};
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(4 * sizeof(int))];
		} c;
		struct msghdr mh = {0};
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = c.buf;
		mh.msg_controllen = sizeof c.buf;
		ssize_t r = recvmsg(g_uw_chan, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) {
			uw_drop_channel(); /* the collector is gone */
			g_uw_chan_fails = 3;
			return;
		}
		int fds[4], nfd = 0;
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; CMSG_LEN((i + 1) * sizeof(int)) <= cm->cmsg_len && nfd < 4; i++)
					memcpy(&fds[nfd++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
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
	if (g_unwind == HS_UNWIND_TABLES && __atomic_load_n(&p_unw_backtrace, __ATOMIC_ACQUIRE))
		return dwarf_walk(out, max);
	return fp_walk(out, max, fp, lo, hi);
}

__attribute__((constructor(102))) static void uw_init(void)
{
	if (g_mode == MODE_ON && g_unwind == HS_UNWIND_TABLES && !p_unw_backtrace) {
		uint32_t saved = tls.in_hook;
		tls.in_hook = 1;
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
	if (HS_UNLIKELY(g_unwind == HS_UNWIND_DWARF) && __atomic_load_n(&p_unw_backtrace, __ATOMIC_ACQUIRE))
		n = dwarf_walk(f, (int)g_max_frames);
	else if (g_unwind == HS_UNWIND_TABLES || g_unwind == HS_UNWIND_TABLES_FP)
		n = uw_capture(f, (int)g_max_frames, fp, t->stack_lo, t->stack_hi);
	else
		n = fp_walk(f, (int)g_max_frames, fp, t->stack_lo, t->stack_hi);
	*id = 0;
	if (n == 0)
		return 1;
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

/* ---- recording ---------------------------------------------------------- */

static void fork_reset(void);

/* Enter our bookkeeping. Returns the thread's slot, or NULL to pass through. */
static inline struct hs_slot *enter(struct hs_tls *t)
{
	if (t->in_hook)
		return NULL;
	if (HS_UNLIKELY(g_forkcheck && *g_forkcheck == 0))
		fork_reset(); /* first call in a forked child */
	if (HS_UNLIKELY(t->swallow)) {
		t->swallow = 0;
		return NULL;
	}
	t->in_hook = HOOK_BUSY;
	struct hs_slot *s = t->slot;
	if (HS_UNLIKELY(!s || t->gen != g_gen)) {
		t->slot = NULL;
		s = attach(t);
		if (!s) {
			t->in_hook = 0;
			return NULL;
		}
	}
	return s;
}

static inline int leave_if_closed(uint32_t st)
{
	if (HS_UNLIKELY(st & HS_STATE_CLOSED)) {
		turn_off();
		return 1;
	}
	return 0;
}

/* The id of the stack f[0..n) (a queued call's), as capture finds it. */
static int stack_of(struct hs_slot *s, uint64_t *f, int n, uint32_t *id)
{
	uint32_t epoch = __atomic_load_n(&g_dl_epoch, __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(s->cache_epoch != epoch)) {
		memset(s->cache, 0, sizeof s->cache);
		s->cache_epoch = epoch;
	}
	uint64_t h = hash_frames(f, n);
	struct hs_cache_ent *ce = &s->cache[h & (CACHE_SIZE - 1)];
	if (ce->hash == h) {
		*id = ce->id;
		return 1;
	}
	return define_stack(s, f, n, h, epoch, ce, id);
}

/* Queue a call made by a signal handler that interrupted our bookkeeping
 * (HOOK_BUSY): async-signal-safe, it only fills an entry of the thread's
 * queue, which the interrupted hook writes out before it returns. */
static void defer_call(struct hs_tls *t, uint32_t func, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                       uint64_t c, uint64_t d, uintptr_t fp)
{
	uint32_t i = __atomic_fetch_add(&t->npend, 1, __ATOMIC_RELAXED);
	if (i >= HS_PEND) {
		__atomic_add_fetch(&t->pend_lost, 1, __ATOMIC_RELAXED);
		return;
	}
	struct hs_pend *e = &t->pend[i];
	e->func = func;
	e->kind = kind;
	e->nbody = nbody;
	e->a = a;
	e->b = b;
	e->c = c;
	e->d = d;
	if (internal_any() && kind == HS_KIND_ALLOC && a)
		internal_del((uintptr_t)a);
	volatile uint32_t *state = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
	uint32_t st = state ? __atomic_load_n(state, __ATOMIC_RELAXED) : 0;
	e->nframes = (st >> kind) & 1 ? (uint32_t)fp_walk(e->frames, (int)g_max_frames, fp, t->stack_lo, t->stack_hi) : 0;
	e->ts = hs_now();
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/* Write a queued call; it is stamped no earlier than the ring's last
 * record (the hook it interrupted may have published after it). */
static void write_pend(struct hs_slot *s, struct hs_pend *e)
{
	uint32_t sid = 0;
	if (e->nframes && !stack_of(s, e->frames, (int)e->nframes, &sid)) {
		count_lost(s);
		return;
	}
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, e->nbody + 2, &nh, 0);
	if (w) {
		uint64_t last = __atomic_load_n(s->last_ts_p, __ATOMIC_RELAXED);
		uint64_t ts = e->ts > last ? e->ts : last;
		uint64_t body[4] = {e->a, e->b, e->c, e->d};
		w[0] = hdr(e->func, e->nbody + 2, sid);
		w[1] = ts;
		memcpy(w + 2, body, (size_t)e->nbody * 8);
		publish(s, nh, ts);
	} else {
		count_lost(s);
	}
	section_end(s);
}

/* Write what signal handlers queued while this thread was in its hook;
 * handlers may queue more meanwhile. */
static HS_NOINLINE void flush_pending(struct hs_tls *t, struct hs_slot *s)
{
	for (;;) {
		uint32_t n = __atomic_load_n(&t->npend, __ATOMIC_ACQUIRE);
		uint32_t lim = n < HS_PEND ? n : HS_PEND;
		for (; t->pdone < lim; t->pdone++)
			write_pend(s, &t->pend[t->pdone]);
		if (__atomic_compare_exchange_n(&t->npend, &n, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			break;
	}
	t->pdone = 0;
	for (uint32_t l = __atomic_exchange_n(&t->pend_lost, 0, __ATOMIC_RELAXED); l; l--)
		count_lost(s);
}

/*
 * A signal handler's call while this thread is in its hook but not writing
 * a record (no section open: walking the stack, say), or waiting for room
 * in the middle of one (make_room): the interrupted hook holds nothing that
 * a record written now would disturb (its section, if open, stays open
 * around this one, and it looks at the ring again once it wakes), so the
 * call is written at once, and waits for room itself. Its stack is walked
 * with frame pointers and defined without the thread's stack cache (which
 * the interrupted hook may be reading); if the interrupted hook holds the
 * stack table's lock, the call is queued instead.
 */
static void direct_call(struct hs_tls *t, uint32_t func, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                        uint64_t c, uint64_t d, uintptr_t fp)
{
	struct hs_slot *s = t->slot;
	uint32_t st = __atomic_load_n(g_state, __ATOMIC_RELAXED);
	if (st & HS_STATE_CLOSED)
		return;
	if (internal_any() && kind == HS_KIND_ALLOC && a)
		internal_del((uintptr_t)a);
	uint32_t sid = 0;
	if ((st >> kind) & 1) {
		uint64_t f[HS_MAX_FRAMES + 1];
		int n = fp_walk(f, (int)g_max_frames, fp, t->stack_lo, t->stack_hi);
		if (n && t->stack_locked) {
			defer_call(t, func, kind, nbody, a, b, c, d, fp);
			return;
		}
		struct hs_cache_ent scratch;
		if (n && !define_stack(s, f, n, hash_frames(f, n), __atomic_load_n(&g_dl_epoch, __ATOMIC_ACQUIRE), &scratch, &sid)) {
			count_lost(s);
			return;
		}
	}
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, nbody + 2, &nh, 0);
	if (w) {
		uint64_t ts = hs_now();
		uint64_t body[4] = {a, b, c, d};
		w[0] = hdr(func, nbody + 2, sid);
		w[1] = ts;
		memcpy(w + 2, body, (size_t)nbody * 8);
		publish(s, nh, ts);
	} else {
		count_lost(s);
	}
	section_end(s);
}

/* A call that arrived while this thread was inside a call of ours. */
static HS_NOINLINE void nested(struct hs_tls *t, uint32_t func, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                               uint64_t c, uint64_t d, uintptr_t fp)
{
	if (t->in_hook == HOOK_BUSY) {
		struct hs_slot *s = t->slot;
		if (s && t->gen == g_gen && g_mode == MODE_ON && (t->safe_point || s->depth == 0))
			direct_call(t, func, kind, nbody, a, b, c, d, fp);
		else
			defer_call(t, func, kind, nbody, a, b, c, d, fp);
	} else if (t->in_hook == HOOK_LIB && func != HS_FUNC_MREMAP && kind != HS_KIND_MMAP && kind != HS_KIND_MUNMAP) {
		if (kind == HS_KIND_REALLOC && c)
			internal_del((uintptr_t)c);
		if (a)
			internal_add((uintptr_t)a);
	}
}

/* An event of 2..4 body words: [addr][size][old][oldsize]. */
static HS_INLINE void record(uint32_t func, uint32_t fam, uint32_t kind, uint32_t nbody, uint64_t a, uint64_t b,
                          uint64_t c, uint64_t d, uintptr_t fp)
{
	struct hs_tls *t = &tls;
	if (HS_UNLIKELY(t->in_hook)) {
		nested(t, func, kind, nbody, a, b, c, d, fp);
		return;
	}
	struct hs_slot *s = enter(t);
	if (!s)
		return;
	uint32_t st = __atomic_load_n(g_state, __ATOMIC_RELAXED);
	if (leave_if_closed(st) || HS_UNLIKELY(!(g_families & fam)))
		goto out;
	if (HS_UNLIKELY(internal_any()) && func != HS_FUNC_MREMAP && (kind == HS_KIND_ALLOC || kind == HS_KIND_REALLOC)) {
		/* a realloc of one of our blocks stays ours; a block the
		 * program gets is not ours, whatever the set remembers */
		if (kind == HS_KIND_REALLOC && c && internal_del((uintptr_t)c)) {
			if (a)
				internal_add((uintptr_t)a);
			goto out;
		}
		if (a)
			internal_del((uintptr_t)a);
	}
	uint32_t sid = 0;
	if ((st >> kind) & 1) {
		if (!capture(t, s, fp, &sid)) {
			count_lost(s);
			goto out;
		}
	}
	uint64_t nh;
	section_begin(s);
	uint64_t *w = reserve(s, nbody + 2, &nh, 0);
	if (HS_LIKELY(w != NULL)) {
		uint64_t ts = hs_now();
		w[0] = hdr(func, nbody + 2, sid);
		w[1] = ts;
		w[2] = a;
		if (nbody > 1)
			w[3] = b;
		if (nbody > 2)
			w[4] = c;
		if (nbody > 3)
			w[5] = d;
		publish(s, nh, ts);
	} else {
		count_lost(s);
	}
	section_end(s);
out:
	if (HS_UNLIKELY(__atomic_load_n(&t->npend, __ATOMIC_RELAXED)) && g_mode == MODE_ON)
		flush_pending(t, s);
	t->in_hook = HOOK_NONE;
}

#define TRACED(fam) (__atomic_load_n(&g_families, __ATOMIC_RELAXED) & (fam))

static HS_INLINE void rec_alloc(uint32_t func, uint32_t fam, void *p, uint64_t size, uintptr_t fp)
{
	if (TRACED(fam) && sample_alloc(p, size))
		record(func, fam, HS_KIND_ALLOC, 2, (uint64_t)(uintptr_t)p, size, 0, 0, fp);
}

/* ---- the wrappers ------------------------------------------------------- */

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

HS_EXPORT void *malloc(size_t n)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	if (HS_UNLIKELY(!real.malloc))
		return boot_alloc(n, 16);
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
	void *p = real.calloc(n, size);
	rec_alloc(HS_FUNC_CALLOC, HS_FAM_CALLOC, p, total, fp);
	return p;
}

HS_EXPORT void free(void *p)
{
	uintptr_t fp = HS_FRAME();
	if (!p || is_boot(p))
		return;
	ensure_reals();
	/* recorded before the block is released, so that whoever gets it next
	 * is stamped later */
	if (TRACED(HS_FAM_FREE)) {
		if (HS_UNLIKELY(internal_any()) && internal_del((uintptr_t)p))
			; /* a block of ours: never shown, nor its free */
		else if (sample_free(p))
			record(HS_FUNC_FREE, HS_FAM_FREE, HS_KIND_FREE, 1, (uint64_t)(uintptr_t)p, 0, 0, 0, fp);
	}
	if (HS_LIKELY(real.free != NULL))
		real.free(p);
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
	int smp = sample_realloc_begin(p);
	void *q = real.realloc(p, n);
	if (TRACED(HS_FAM_REALLOC) && sample_realloc_end(smp, &p, q, n))
		record(HS_FUNC_REALLOC, HS_FAM_REALLOC, HS_KIND_REALLOC, 3, (uint64_t)(uintptr_t)q, n, (uint64_t)(uintptr_t)p, 0, fp);
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
	/* glibc's reallocarray calls realloc: that one is not the program's call */
	int smp = sample_realloc_begin(p);
	void *q = UNTRACED(real.reallocarray(p, n, size));
	if (TRACED(HS_FAM_REALLOC) && sample_realloc_end(smp, &p, q, total))
		record(HS_FUNC_REALLOCARRAY, HS_FAM_REALLOC, HS_KIND_REALLOC, 3, (uint64_t)(uintptr_t)q, total, (uint64_t)(uintptr_t)p, 0,
		       fp);
	return q;
}

HS_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	uintptr_t fp = HS_FRAME();
	ensure_reals();
	if (HS_UNLIKELY(!real.posix_memalign)) {
		void *p = boot_alloc(n, align);
		if (!p)
			return ENOMEM;
		*out = p;
		return 0;
	}
	int r = UNTRACED(real.posix_memalign(out, align, n));
	rec_alloc(HS_FUNC_POSIX_MEMALIGN, HS_FAM_ALIGNED, r == 0 ? *out : NULL, n, fp);
	return r;
}

#define ALIGNED_WRAPPER(name, FUNC, params, args, bootexpr)                                                            \
	HS_EXPORT void *name params                                                                                    \
	{                                                                                                              \
		uintptr_t fp = HS_FRAME();                                                                             \
		ensure_reals();                                                                                        \
		if (HS_UNLIKELY(!real.name))                                                                           \
			return bootexpr;                                                                               \
		void *p = UNTRACED(real.name args);                                                                    \
		rec_alloc(FUNC, HS_FAM_ALIGNED, p, n, fp);                                                             \
		return p;                                                                                              \
	}

ALIGNED_WRAPPER(aligned_alloc, HS_FUNC_ALIGNED_ALLOC, (size_t align, size_t n), (align, n), boot_alloc(n, align))
ALIGNED_WRAPPER(memalign, HS_FUNC_MEMALIGN, (size_t align, size_t n), (align, n), boot_alloc(n, align))
ALIGNED_WRAPPER(valloc, HS_FUNC_VALLOC, (size_t n), (n), boot_alloc(n, 4096))
ALIGNED_WRAPPER(pvalloc, HS_FUNC_PVALLOC, (size_t n), (n), boot_alloc(n, 4096))

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
	if (r == 0)
		__atomic_add_fetch(&g_dl_epoch, 1, __ATOMIC_RELEASE);
	return r;
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
	static int said;
	if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		return;
	static const char msg[] = "heapscope: dlopen with RTLD_DEEPBIND: the flag is dropped so that the library's "
	                          "allocations are traced\n";
	ssize_t r = write(2, msg, sizeof msg - 1);
	(void)r;
}

HS_EXPORT void *dlopen(const char *file, int flags)
{
	ensure_reals();
	if (HS_UNLIKELY(flags & RTLD_DEEPBIND) && g_mode != MODE_OFF) {
		flags &= ~RTLD_DEEPBIND;
		deepbind_note();
	}
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
		IN_LIB(f = (cxx_fn)dlsym(RTLD_NEXT, name));
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

#define CXX_NEW(sym, FUNC)                                                                                             \
	HS_EXPORT uintptr_t sym(uintptr_t a, uintptr_t b, uintptr_t c)                                                 \
	{                                                                                                              \
		uintptr_t fp = HS_FRAME();                                                                             \
		static cxx_fn fn;                                                                                      \
		ensure_reals();                                                                                        \
		cxx_fn f = cxx_real(&fn, #sym);                                                                        \
		if (!f)                                                                                                \
			abort();                                                                                       \
		if (!TRACED(HS_FAM_CXX) || tls.in_hook || tls.swallow)                                                 \
			return f(a, b, c);                                                                             \
		struct cxx_call call __attribute__((cleanup(cxx_end))) = {0, FUNC, a, fp};                             \
		tls.swallow = 1;                                                                                       \
		uintptr_t p = f(a, b, c);                                                                              \
		tls.swallow = 0;                                                                                       \
		call.done = 1;                                                                                         \
		rec_alloc(FUNC, HS_FAM_CXX, (void *)p, a, fp);                                                         \
		return p;                                                                                              \
	}

#define CXX_DELETE(sym, FUNC)                                                                                          \
	HS_EXPORT void sym(uintptr_t a, uintptr_t b, uintptr_t c)                                                      \
	{                                                                                                              \
		uintptr_t fp = HS_FRAME();                                                                             \
		static cxx_fn fn;                                                                                      \
		ensure_reals();                                                                                        \
		cxx_fn f = cxx_real(&fn, #sym);                                                                        \
		if (!f)                                                                                                \
			abort();                                                                                       \
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

/* ---- fork --------------------------------------------------------------- */

static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
	pthread_mutex_lock(&g_stack_lock);
}

/*
 * Name the forking thread's children to the collector (HS_MSG_CHILDREN),
 * connecting first if this process has not yet: before fork returns, so
 * that the collector knows of the child before this process can exit,
 * whenever the child first allocates. Errors only lose the notice.
 */
static void report_children(void)
{
	static char buf[4096];
	static uint32_t msg[HS_CHILDREN_SIZE / 4 + HS_CHILDREN_MAX];
	uint32_t saved = tls.in_hook;
	tls.in_hook = HOOK_LIB;
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&g_lock);
	if (ensure_connected_locked() && sock_ok()) {
		ssize_t n = read_file("/proc/thread-self/children", buf, sizeof buf - 1);
		uint32_t count = 0;
		for (ssize_t i = 0; n > 0 && i < n && count < HS_CHILDREN_MAX;) {
			uint32_t pid = 0;
			while (i < n && buf[i] >= '0' && buf[i] <= '9')
				pid = pid * 10 + (uint32_t)(buf[i++] - '0');
			if (pid)
				msg[HS_CHILDREN_SIZE / 4 + count++] = pid;
			while (i < n && (buf[i] < '0' || buf[i] > '9'))
				i++;
		}
		if (count) {
			msg[0] = HS_MAGIC;
			msg[1] = HS_VERSION;
			msg[2] = HS_MSG_CHILDREN;
			msg[3] = count;
			ssize_t r;
			do
				r = send(g_sock, msg, HS_CHILDREN_SIZE + (size_t)count * 4, MSG_NOSIGNAL);
			while (r < 0 && errno == EINTR);
		}
	}
	pthread_mutex_unlock(&g_lock);
	pthread_setcancelstate(cancel, NULL);
	tls.in_hook = saved;
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&g_stack_lock);
	pthread_mutex_unlock(&g_lock);
	if (__atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) != MODE_OFF)
		report_children();
}

/*
 * The child gets a stream of its own: it forgets the parent's rings (which
 * it must never write: they are shared with the parent), stack ids and
 * modules, and connects again on its next call. Runs once per fork: from
 * our atfork handler or from the child's first call, whichever comes first.
 */
static HS_NOINLINE void fork_reset(void)
{
	/* Guarded: nothing it calls may record into the parent's ring, which
	 * this thread's slot still names until the end. */
	uint32_t saved = tls.in_hook;
	tls.in_hook = HOOK_BUSY;
	tls.slot = NULL; /* the parent's ring: no signal handler's call goes there */
	if (g_forkcheck)
		*g_forkcheck = 1;
	pthread_mutex_init(&g_lock, NULL);
	pthread_mutex_init(&g_stack_lock, NULL);
	for (struct hs_slot *s = g_slots, *next; s; s = next) {
		next = s->next;
		sys_munmap(s->map, HS_RING_DATA + (size_t)s->size);
		sys_munmap(s, sizeof *s);
	}
	g_slots = NULL;
	g_nslots = 0;
	stab_reset();
	if (g_mods)
		sys_munmap(g_mods, g_mods_cap * sizeof *g_mods);
	g_mods = NULL;
	g_mods_len = g_mods_cap = 0;
	g_mods_valid = 0;
	g_next_stack_id = 1;
	if (g_sock >= 0 && sock_ok())
		close(g_sock);
	g_sock = -1;
	g_gen++;
	tls.slot = NULL;
	if (g_mode == MODE_ON)
		g_mode = MODE_UNKNOWN;
	tls.in_hook = saved;
}

static void atfork_child(void)
{
	if (!g_forkcheck || *g_forkcheck == 0)
		fork_reset();
}

/* ---- start-up ----------------------------------------------------------- */

static int self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uintptr_t me = (uintptr_t)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD || !(p->p_flags & PF_X))
			continue;
		uintptr_t lo = info->dlpi_addr + p->p_vaddr, hi = lo + p->p_memsz;
		if (me >= lo && me < hi) {
			g_self_lo = lo;
			g_self_hi = hi;
			return 1;
		}
	}
	return 0;
}

/*
 * libunwind is loaded with dlopen, privately (RTLD_LOCAL: its _Unwind_* and
 * backtrace must not replace the program's), from our constructor: a
 * constructor may call dlopen, an allocation inside the dynamic loader may
 * not. Allocations before this point are unwound with frame pointers.
 */
static void load_libunwind(void)
{
	void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return;
	int (*set_policy)(void *, int) = (int (*)(void *, int))dlsym(h, "_ULx86_64_set_caching_policy");
	void **as = (void **)dlsym(h, "_ULx86_64_local_addr_space");
	int (*bt)(void **, int) = (int (*)(void **, int))dlsym(h, "unw_backtrace");
	if (!bt)
		return;
	if (set_policy && as)
		set_policy(*as, 2 /* UNW_CACHE_PER_THREAD */);
	dl_iterate_phdr(self_cb, (void *)(uintptr_t)dwarf_walk);
	__atomic_store_n(&p_unw_backtrace, bt, __ATOMIC_RELEASE);
}

__attribute__((constructor(101))) static void hs_init(void)
{
	ensure_reals();
	if (!getenv(HS_ENV_SOCKET)) {
		/* preloaded without a session (an environment that leaked): run
		 * untraced, and stop the leak here */
		turn_off();
		return;
	}
	uint32_t saved = tls.in_hook;
	tls.in_hook = HOOK_LIB;
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	pthread_mutex_lock(&g_lock);
	int on = ensure_connected_locked();
	pthread_mutex_unlock(&g_lock);
	pthread_setcancelstate(cancel, NULL);
	if (on && g_unwind == HS_UNWIND_DWARF && !p_unw_backtrace)
		load_libunwind();
	tls.in_hook = saved;
}
