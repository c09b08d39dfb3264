/*
 * fork.h: fork handling: the atfork handlers, the CHILDREN message, and the
 * reset of a forked child (its slots and connection are its parent's).
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_FORK_H
#define HEAPSCOPE_FORK_H

static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
	pthread_mutex_lock(&g_stack_lock);
	own_lock();
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
	own_unlock();
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
static void inj_fork_child(void);

static HS_NOINLINE void fork_reset(void)
{
	/* Guarded: nothing it calls may record into the parent's ring, which
	 * this thread's slot still names until the end. */
	tls_fork_child();
	uint32_t saved = tls.in_hook;
	tls.in_hook = HOOK_BUSY;
	tls.slot = NULL; /* the parent's ring: no signal handler's call goes there */
	if (g_forkcheck)
		*g_forkcheck = 1;
	pthread_mutex_init(&g_lock, NULL);
	pthread_mutex_init(&g_stack_lock, NULL);
	own_unlock(); /* held by the atfork handler, or by a thread the child does not have */
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
	if (g_injected)
		inj_fork_child();
	tls.in_hook = saved;
}

static void atfork_child(void)
{
	if (!g_forkcheck || *g_forkcheck == 0)
		fork_reset();
}

#endif
