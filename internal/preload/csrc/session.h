/*
 * session.h: the session's state (mode, families, control block, locks), the
 * collector's clock and the raw system calls the library maps memory with.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_SESSION_H
#define HEAPSCOPE_SESSION_H

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

static inline volatile uint32_t *ctl32(int off) { return (volatile uint32_t *)(g_ctl + off); }
static inline volatile uint64_t *ctl64(int off) { return (volatile uint64_t *)(g_ctl + off); }

#endif
