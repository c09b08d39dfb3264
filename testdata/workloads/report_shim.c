// report_shim: a shim, as version managers install: it runs the program
// named by its arguments in a child (fork, then exec at once) and exits
// with its status. For the per-process report tests.
//
//   report_shim PROGRAM [ARGS...]
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		execv(argv[1], argv + 1);
		_exit(127);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
