// preload_fork: a process that forks, and a child that execs.
//
//   preload_fork K        parent: K mallocs of 111 (site_parent), then fork;
//                         child: frees one parent block, K mallocs of 222
//                         (site_child), then execs "preload_fork exec K"
//   preload_fork exec K   K mallocs of 333 (site_exec)
//   preload_fork raw K    parent: K mallocs of 111 (site_parent), then a
//                         fork by system call, which runs no atfork
//                         handlers; child: K mallocs of 222 (site_child)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile sink;
static void *kept[1000];

__attribute__((noinline)) void site_parent(long i) { kept[i % 1000] = malloc(111); }
__attribute__((noinline)) void site_child(long i) { sink = malloc(222); }
__attribute__((noinline)) void site_exec(long i) { sink = malloc(333); }

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "exec") == 0) {
		long k = atol(argv[2]);
		for (long i = 0; i < k; i++)
			site_exec(i);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "raw") == 0) {
		long k = atol(argv[2]);
		for (long i = 0; i < k; i++)
			site_parent(i);
		pid_t pid = (pid_t)syscall(SYS_fork);
		if (pid < 0)
			return 1;
		if (pid == 0) {
			for (long i = 0; i < k; i++)
				site_child(i);
			_exit(0);
		}
		int status;
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return 1;
		return 0;
	}
	if (argc != 2)
		return 2;
	long k = atol(argv[1]);
	for (long i = 0; i < k; i++)
		site_parent(i);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		free(kept[0]); // allocated by the parent, before this stream began
		for (long i = 0; i < k; i++)
			site_child(i);
		execl("/proc/self/exe", argv[0], "exec", argv[1], (char *)NULL);
		_exit(127);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return 1;
	return 0;
}
