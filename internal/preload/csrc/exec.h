/*
 * exec.h: the exec family. The dynamic loader ignores LD_PRELOAD for a
 * set-user-ID or set-group-ID program, or one with file capabilities (its
 * secure mode): such a program that a traced process execs or spawns is
 * not traced. The wrappers tell the collector before the exec (and again
 * if it fails), so that the trace says so instead of missing it without a
 * word; then they call the C library's function. fexecve and execveat are
 * not wrapped; nor is the exec inside the C library's own spawns (system,
 * popen): the shell they run is traced, and its exec is seen.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_EXEC_H
#define HEAPSCOPE_EXEC_H

/* Whether the loader will run path in secure mode for this process. */
static int secure_exec(const char *path)
{
	struct stat st;
	if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	struct statvfs vfs;
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
		return 0; /* the bits mean nothing there */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0) {
		char magic[2];
		ssize_t n = read(fd, magic, 2);
		close(fd);
		if (n == 2 && magic[0] == '#' && magic[1] == '!')
			return 0; /* a script: the kernel ignores its set-ID bits */
	}
	if ((st.st_mode & S_ISUID) && st.st_uid != geteuid())
		return 1;
	if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != getegid())
		return 1;
	return geteuid() != 0 && getxattr(path, "security.capability", NULL, 0) > 0;
}

/* The file execvp would run for file (searching PATH as it does, for a
 * name without a slash) into buf; NULL if none. */
static const char *exec_path(const char *file, char *buf, size_t size)
{
	if (!file || !*file || strchr(file, '/'))
		return file;
	const char *p = getenv("PATH");
	if (!p)
		p = "/bin:/usr/bin";
	size_t fl = strlen(file);
	for (;;) {
		size_t dl = strcspn(p, ":");
		const char *dir = dl ? p : ".";
		size_t l = dl ? dl : 1;
		if (l + 1 + fl < size) {
			memcpy(buf, dir, l);
			buf[l] = '/';
			memcpy(buf + l + 1, file, fl + 1);
			if (access(buf, X_OK) == 0)
				return buf;
		}
		if (!p[dl])
			return NULL;
		p += dl + 1;
	}
}

/* Announce an exec of path; whether it was (then exec_failed follows a
 * return). */
static int exec_announce(const char *path)
{
	if (__atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) == MODE_OFF)
		return 0;
	int saved = errno;
	if (g_forkcheck && *g_forkcheck == 0)
		fork_reset(); /* a forked child that has not called us yet */
	int s = secure_exec(path);
	if (s)
		send_note(HS_NOTE_SETID_EXEC, path, 0);
	errno = saved;
	return s;
}

static void exec_failed(void) { send_note(HS_NOTE_EXEC_FAILED, NULL, 0); }

/* The C library's function name, or -1 with ENOSYS. */
#define EXEC_REAL(name)                                                                                                \
	ensure_reals();                                                                                                \
	__typeof__(real.name) real_ = real.name;                                                                       \
	if (!real_) {                                                                                                  \
		errno = ENOSYS;                                                                                        \
		return -1;                                                                                             \
	}

HS_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	EXEC_REAL(execve)
	int s = exec_announce(path);
	int r = real_(path, argv, envp);
	if (s)
		exec_failed();
	return r;
}

HS_EXPORT int execv(const char *path, char *const argv[])
{
	EXEC_REAL(execv)
	int s = exec_announce(path);
	int r = real_(path, argv);
	if (s)
		exec_failed();
	return r;
}

HS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	EXEC_REAL(execvpe)
	char buf[PATH_MAX];
	int s = exec_announce(exec_path(file, buf, sizeof buf));
	int r = real_(file, argv, envp);
	if (s)
		exec_failed();
	return r;
}

HS_EXPORT int execvp(const char *file, char *const argv[])
{
	EXEC_REAL(execvp)
	char buf[PATH_MAX];
	int s = exec_announce(exec_path(file, buf, sizeof buf));
	int r = real_(file, argv);
	if (s)
		exec_failed();
	return r;
}

/* execl's arguments as an argv on the stack, and after them (execle) the
 * environment. */
#define EXECL_ARGV(arg, envp)                                                                                          \
	size_t argc_ = 1;                                                                                              \
	va_list ap_;                                                                                                   \
	va_start(ap_, arg);                                                                                            \
	while (va_arg(ap_, char *))                                                                                    \
		argc_++;                                                                                               \
	va_end(ap_);                                                                                                   \
	char **argv_ = __builtin_alloca((argc_ + 1) * sizeof *argv_);                                                  \
	argv_[0] = (char *)arg;                                                                                        \
	va_start(ap_, arg);                                                                                            \
	for (size_t i_ = 1; i_ <= argc_; i_++)                                                                         \
		argv_[i_] = va_arg(ap_, char *);                                                                       \
	envp = va_arg(ap_, char **);                                                                                   \
	va_end(ap_)

HS_EXPORT int execl(const char *path, const char *arg, ...)
{
	char **envp = NULL;
	EXECL_ARGV(arg, envp);
	(void)envp;
	return execv(path, argv_);
}

HS_EXPORT int execlp(const char *file, const char *arg, ...)
{
	char **envp = NULL;
	EXECL_ARGV(arg, envp);
	(void)envp;
	return execvp(file, argv_);
}

HS_EXPORT int execle(const char *path, const char *arg, ...)
{
	char **envp = NULL;
	EXECL_ARGV(arg, envp);
	return execve(path, argv_, envp);
}

/* posix_spawn: said once it started the program, as process *pid. */
static int spawn_note(int r, pid_t *pid, const char *path)
{
	if (r == 0 && __atomic_load_n(&g_mode, __ATOMIC_ACQUIRE) != MODE_OFF) {
		int saved = errno;
		if (secure_exec(path)) {
			char buf[PATH_MAX + 32];
			size_t n = strlen(path) < PATH_MAX ? strlen(path) : PATH_MAX - 1;
			memcpy(buf, path, n);
			buf[n] = 0;
			send_note(HS_NOTE_SETID_SPAWN, buf, *pid);
		}
		errno = saved;
	}
	return r;
}

HS_EXPORT int posix_spawn(pid_t *pid, const char *path, const void *fa, const void *attr, char *const argv[],
                          char *const envp[])
{
	EXEC_REAL(posix_spawn)
	pid_t child = 0;
	int r = real_(&child, path, fa, attr, argv, envp);
	if (pid)
		*pid = child;
	return spawn_note(r, &child, path);
}

HS_EXPORT int posix_spawnp(pid_t *pid, const char *file, const void *fa, const void *attr, char *const argv[],
                           char *const envp[])
{
	EXEC_REAL(posix_spawnp)
	pid_t child = 0;
	int r = real_(&child, file, fa, attr, argv, envp);
	if (pid)
		*pid = child;
	char buf[PATH_MAX];
	return spawn_note(r, &child, exec_path(file, buf, sizeof buf));
}

#endif
