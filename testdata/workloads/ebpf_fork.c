// ebpf_fork: a running process that forks a child that execs, for the eBPF
// provider's following of children.
//
//   ebpf_fork K        prints "ready" and waits for a line (the tracer
//                      attaches meanwhile); then K mallocs of 111 kept
//                      (site_parent: leaked) and K malloc+free pairs of 444
//                      (site_temp); forks, and the child frees one of the
//                      parent's blocks, makes K mallocs of 222 (site_child:
//                      leaked) and K pairs of 444, and execs
//                      "ebpf_fork exec K". The parent waits for the child,
//                      prints "child PID" and "done", and waits for a line
//                      before it exits.
//   ebpf_fork exec K   K mallocs of 333 (site_exec: leaked) and K pairs of
//                      444, then exits.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile sink;
static void *kept[1000];

__attribute__((noinline)) void site_parent(long i) { kept[i % 1000] = malloc(111); }
__attribute__((noinline)) void site_child(long i) { sink = malloc(222); }
__attribute__((noinline)) void site_exec(long i) { sink = malloc(333); }
__attribute__((noinline)) void site_temp(long i) { sink = malloc(444); free(sink); }

static void wait_line(void)
{
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "exec") == 0) {
		long k = atol(argv[2]);
		for (long i = 0; i < k; i++) {
			site_exec(i);
			site_temp(i);
		}
		return 0;
	}
	if (argc != 2)
		return 2;
	long k = atol(argv[1]);
	printf("ready\n");
	fflush(stdout);
	wait_line();
	for (long i = 0; i < k; i++) {
		site_parent(i);
		site_temp(i);
	}
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		free(kept[0]); // the parent's block: a free of a block not seen allocated
		for (long i = 0; i < k; i++) {
			site_child(i);
			site_temp(i);
		}
		execl("/proc/self/exe", argv[0], "exec", argv[1], (char *)NULL);
		_exit(127);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return 1;
	printf("child %d\ndone\n", (int)pid);
	fflush(stdout);
	wait_line();
	return 0;
}
