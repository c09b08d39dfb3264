// preload_setid: traced processes that exec a set-user-ID program, which
// the dynamic loader runs without LD_PRELOAD (so it is not traced).
//
//   preload_setid exec PROG [BAD]
//                             tries to exec BAD, which must fail (and says
//                             "failed" if it did), then forks two children
//                             that exec PROG with "id": the first after a
//                             heap call (a traced image execs it), the
//                             second at once (a child that never connected
//                             execs it); waits for both
//   preload_setid id          says "ruid R euid E", allocates, and exits
// The children's lines come first, then "exec done".
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile sink;

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "id") == 0) {
		sink = malloc(100);
		printf("ruid %d euid %d\n", (int)getuid(), (int)geteuid());
		return 0;
	}
	if (argc < 3 || argc > 4 || strcmp(argv[1], "exec") != 0)
		return 2;
	if (argc == 4) {
		execl(argv[3], argv[3], "id", (char *)NULL);
		printf("failed\n");
	}
	fflush(stdout);
	for (int i = 0; i < 2; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			if (i == 0) // connect first: a traced image execs it
				free(sink = malloc(64));
			execl(argv[2], argv[2], "id", (char *)NULL);
			_exit(127);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return 1;
	}
	printf("exec done\n");
	return 0;
}
