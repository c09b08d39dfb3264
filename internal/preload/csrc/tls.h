/*
 * tls.h: the blocks that hold each thread's state (struct hs_tls), found
 * through one word of initial-exec TLS (tls_p, thread.h).
 *
 * A block is mapped at a thread's first call and kept on a list of every
 * block, never unmapped. A thread that starts takes the block of a thread
 * that is gone (its owner's thread ID no longer names a thread of this
 * process, or names the thread itself: the ID was reused) before it maps a
 * new one, so that a program that starts and ends threads for ever keeps
 * as many blocks as it has threads at once, give or take the few a
 * starting thread looks at. Everything here is a system call or an atomic:
 * a signal handler's first call on a thread may come here, even while the
 * thread itself is here.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_TLS_H
#define HEAPSCOPE_TLS_H

static struct hs_tls *g_tls_all; /* every block, newest first */

/* Used by a thread when no block can be mapped: every call passes through
 * untraced (a nested call of HOOK_REAL records nothing). Shared, so only
 * ever written with the values it holds. */
static struct hs_tls g_tls_none = {.in_hook = HOOK_REAL};

#define TLS_LOOK 16 /* blocks a starting thread looks at for one to reuse */

static int tls_gone(pid_t pid, pid_t tid)
{
	return syscall(SYS_tgkill, pid, tid, 0) < 0 && errno == ESRCH;
}

static HS_NOINLINE struct hs_tls *tls_new(void)
{
	int saved = errno;
	pid_t pid = (pid_t)syscall(SYS_getpid), me = (pid_t)syscall(SYS_gettid);
	struct hs_tls *t = NULL;
	int looked = 0;
	for (struct hs_tls *c = __atomic_load_n(&g_tls_all, __ATOMIC_ACQUIRE); c && looked < TLS_LOOK;
	     c = c->all_next, looked++) {
		if (tls_p) /* a signal handler on this thread made its own meanwhile */
			break;
		pid_t op = __atomic_load_n(&c->owner_pid, __ATOMIC_ACQUIRE);
		pid_t ot = __atomic_load_n(&c->owner_tid, __ATOMIC_ACQUIRE);
		if (op != pid && op != 0)
			continue; /* a parent's block, until fork_reset frees it */
		if (ot != 0 && ot != me && !tls_gone(pid, ot))
			continue;
		if (__atomic_compare_exchange_n(&c->owner_tid, &ot, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			memset(c, 0, offsetof(struct hs_tls, owner_pid));
			__atomic_store_n(&c->owner_pid, pid, __ATOMIC_RELEASE);
			t = c;
			break;
		}
	}
	if (!t) {
		size_t bytes = (sizeof(struct hs_tls) + 4095) & ~(size_t)4095;
		void *m = (void *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			errno = saved;
			return &g_tls_none;
		}
		t = m;
		t->owner_pid = pid;
		t->owner_tid = me;
		struct hs_tls *head = __atomic_load_n(&g_tls_all, __ATOMIC_RELAXED);
		do
			t->all_next = head;
		while (!__atomic_compare_exchange_n(&g_tls_all, &head, t, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
	}
	struct hs_tls *have = tls_p;
	if (have) {
		/* a signal handler on this thread made one meanwhile: keep that */
		__atomic_store_n(&t->owner_tid, 0, __ATOMIC_RELEASE);
		t = have;
	} else {
		tls_p = t;
	}
	errno = saved;
	return t;
}

/* In a forked child: this thread's block is its own now, and every other
 * block of another process (the parent's threads, which the child does not
 * have) is free. */
static void tls_fork_child(void)
{
	pid_t pid = (pid_t)syscall(SYS_getpid);
	struct hs_tls *mine = tls_p;
	if (mine) {
		__atomic_store_n(&mine->owner_pid, pid, __ATOMIC_RELEASE);
		__atomic_store_n(&mine->owner_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	}
	for (struct hs_tls *c = __atomic_load_n(&g_tls_all, __ATOMIC_ACQUIRE); c; c = c->all_next)
		if (c != mine && __atomic_load_n(&c->owner_pid, __ATOMIC_ACQUIRE) != pid) {
			__atomic_store_n(&c->owner_tid, 0, __ATOMIC_RELEASE);
			__atomic_store_n(&c->owner_pid, 0, __ATOMIC_RELEASE);
		}
}

#endif
