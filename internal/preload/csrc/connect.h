/*
 * connect.h: the environment a traced process passes on, and the connection to
 * the collector: checks of the socket and its peer, HELLO/WELCOME, sending
 * rings' memfds, noticing that the collector is gone.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_CONNECT_H
#define HEAPSCOPE_CONNECT_H

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

/* This library's file name, found by the constructor (dladdr takes the
 * loader's lock: turn_off may run where waiting for it would deadlock). */
static char g_self_file[PATH_MAX];

static void find_self_file(void)
{
	Dl_info di;
	if (dladdr((void *)find_self_file, &di) && di.dli_fname && strlen(di.dli_fname) < sizeof g_self_file)
		strcpy(g_self_file, di.dli_fname);
}

static void scrub_env(void)
{
	static char lib[PATH_MAX];
	const char *l = getenv(HS_ENV_LIB);
	if (l && strlen(l) < sizeof lib)
		strcpy(lib, l);
	else
		strcpy(lib, g_self_file);
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

static void inj_kick(void);

static void turn_off(void)
{
	if (__atomic_exchange_n(&g_mode, MODE_OFF, __ATOMIC_ACQ_REL) == MODE_OFF)
		return;
	__atomic_store_n(&g_families, 0, __ATOMIC_RELEASE);
	if (g_injected)
		inj_kick(); /* nothing in the environment is ours; the watcher puts the GOT back */
	else
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

/*
 * Receive one message of at most len bytes into buf and the descriptors
 * passed with it (SCM_RIGHTS, made close-on-exec): up to max (at most 4) into
 * fds, their number into *nfd; any more that fit the control buffer's padding
 * are closed. Returns recvmsg's result.
 */
static ssize_t recv_fds(int sock, void *buf, size_t len, int flags, int *fds, int max, int *nfd)
{
	struct iovec iov = {buf, len};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} c;
	if (max > 4)
		max = 4;
	struct msghdr mh = {0};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = c.buf;
	mh.msg_controllen = CMSG_SPACE((size_t)max * sizeof(int));
	ssize_t r = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	*nfd = 0;
	if (r <= 0)
		return r;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; CMSG_LEN((i + 1) * sizeof(int)) <= cm->cmsg_len; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
				if (*nfd < max)
					fds[(*nfd)++] = fd;
				else
					close(fd);
			}
	return r;
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
static int hello_locked(int fd, int cont);

static int connect_locked(int cont)
{
	if (g_injected)
		return 0; /* no socket to connect to: the injector gave us ours (inject.h) */
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
	return hello_locked(fd, cont);
}

/*
 * Say hello on the connected socket fd, which this takes (closed on
 * failure): HELLO, then WELCOME with the control block, mapped and read
 * when this image has none. Called with g_lock held and in_hook set.
 * Returns 1 when tracing.
 */
static int hello_locked(int fd, int cont)
{
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
	IN_LIB(h->heap = malloc_heap()); /* the first time, dlsym may allocate */
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
	ssize_t r;
	int cfd = -1, nfd;
	do
		r = recv_fds(fd, &w, sizeof w, 0, &cfd, 1, &nfd);
	while (r < 0 && errno == EINTR);
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

static int ensure_connected_locked(void);

/* A NOTE message about process pid into buf; its length. */
static char g_note[HS_NOTE_SIZE + HS_NOTE_PATH_MAX] __attribute__((aligned(8)));

static size_t note_msg(char *buf, uint32_t code, pid_t pid, const char *path)
{
	size_t n = path ? strlen(path) : 0;
	if (n > HS_NOTE_PATH_MAX)
		n = HS_NOTE_PATH_MAX;
	struct hs_note m = {HS_MAGIC, HS_VERSION, HS_MSG_NOTE, code, (uint32_t)pid, (uint32_t)n};
	memcpy(buf, &m, sizeof m);
	memcpy(buf + sizeof m, path, n);
	return sizeof m + n;
}

/*
 * Tell the collector something for the user (HS_NOTE_*; path may be NULL)
 * about process about (0: this one): the program's streams are never
 * written to. Connects first if this image
 * has not yet (a forked child that execs before its first heap call). A
 * vfork child shares its parent's memory: it writes nothing there and
 * says it on its parent's connection.
 */
static void send_note(uint32_t code, const char *path, pid_t about)
{
	int saved = errno;
	pid_t me = (pid_t)syscall(SYS_getpid);
	if (me != g_pid && g_mode == MODE_ON && g_conn_gen == g_gen) {
		char buf[HS_NOTE_SIZE + 512];
		if (!path || strlen(path) < 512) {
			size_t n = note_msg(buf, code, about ? about : me, path);
			if (sock_ok())
				send(g_sock, buf, n, MSG_NOSIGNAL);
		}
		errno = saved;
		return;
	}
	int cancel;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	uint32_t hook = tls.in_hook;
	tls.in_hook = HOOK_LIB;
	pthread_mutex_lock(&g_lock);
	if (ensure_connected_locked() && sock_ok()) {
		size_t n = note_msg(g_note, code, about ? about : me, path);
		ssize_t r;
		do
			r = send(g_sock, g_note, n, MSG_NOSIGNAL);
		while (r < 0 && errno == EINTR);
	}
	pthread_mutex_unlock(&g_lock);
	tls.in_hook = hook;
	pthread_setcancelstate(cancel, NULL);
	errno = saved;
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
	if (g_injected && g_sock < 0)
		return 1; /* closed once the collector was found gone: an injected process cannot reconnect */
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

#endif
