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
 *    calls that may allocate (dlsym, realpath, dlopen, libunwind's first
 *    walk) run in HOOK_LIB, and what they allocate comes from our own heap
 *    (own.inc), untraced, never from the program's.
 *  - A hook never calls a C library function that may wait for a lock the
 *    program's thread can hold when it calls malloc (a thread's own lock in
 *    pthread_getattr_np, the loader's lock in dl_iterate_phdr's callbacks),
 *    and never waits for such a lock while it holds one of ours. See "What
 *    a hook may call" in ../README.md.
 *  - The hot path takes no lock shared between threads: a thread writes only
 *    its own ring. Locks are taken only to attach a thread, to define a new
 *    stack or to connect.
 *  - Every call either reaches the ring or, in drop mode, is counted lost.
 *
 * The library is one translation unit (a unity build): this file includes
 * its parts, one concern each, in order, and build.sh compiles only it.
 * One unit lets the compiler inline the hot path (enter, the sampling
 * countdown, reserve/publish, the stack cache) across parts without LTO
 * and without exporting state between objects: the code it emits is what
 * the single file emitted.
 *   thread.inc    the real functions, thread state, reentrancy, signals held
 *   tls.inc       the blocks that hold each thread's state
 *   usdt.inc      the otel_memory USDT probes of sampled blocks (--emit-usdt)
 *   sample.inc    sampling mode (--sample)
 *   boot.inc      the bootstrap arena, resolving the real functions
 *   session.inc   session state, clock, raw system calls
 *   own.inc       the interposer's own heap, for what the C library allocates for it
 *   connect.inc   environment, connection and handshake with the collector
 *   ring.inc      per-thread rings: reserve, publish, wait for room, attach
 *   stack.inc     frame-pointer and libunwind walks, stack table, modules
 *   uwtables.inc  table-driven unwinding (--unwind tables)
 *   record.inc    recording a call, and calls made by signal handlers
 *   hooks.inc     the exported entry points
 *   fork.inc      fork handlers and the forked child's reset
 *   exec.inc      the exec family: a set-ID program is announced
 *   got.inc       attach --inject: GOT entries redirected and put back
 *   inject.inc    attach --inject: the entry points and the watcher thread
 * and, below, start-up.
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
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "protocol.h"

#define HS_EXPORT      __attribute__((visibility("default")))
#define HS_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HS_NOINLINE    __attribute__((noinline))
#define HS_INLINE      inline __attribute__((always_inline))
#define HS_FRAME()     ((uintptr_t)__builtin_frame_address(0))

extern char **environ;
extern void *__libc_stack_end;

/*
 * The parts of this one translation unit (.inc: each is included here once,
 * in this order, and uses what the parts before it define; protocol.h is the
 * only header, shared with the Go side).
 */
#include "thread.inc"
#include "tls.inc"
#include "usdt.inc"
#include "sample.inc"
#include "boot.inc"
#include "session.inc"
#include "own.inc"
#include "connect.inc"
#include "ring.inc"
#include "stack.inc"
#include "uwtables.inc"
#include "record.inc"
#include "hooks.inc"
#include "fork.inc"
#include "exec.inc"
#include "got.inc"
#include "inject.inc"

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
	iterate_phdr(self_cb, (void *)(uintptr_t)dwarf_walk);
	__atomic_store_n(&p_unw_backtrace, bt, __ATOMIC_RELEASE);
}

__attribute__((constructor(101))) static void hs_init(void)
{
	/* Loaded by dlopen into a running process (attach --inject), this copy
	 * is not the program's malloc (RTLD_DEFAULT looks in the global scope
	 * first, where a preloaded copy comes before the C library), and no
	 * session's environment names it: the injector's calls start the
	 * session. */
	if (!getenv(HS_ENV_SOCKET) && dlsym(RTLD_DEFAULT, "malloc") != (void *)got_self_malloc)
		g_injected = 1;
	ensure_reals();
	/* What takes the loader's lock is done here, once, before any lock of
	 * ours is held and (as a rule) before the program has threads. */
	IN_LIB(find_self_file(); malloc_heap());
	if (g_injected)
		return;
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
