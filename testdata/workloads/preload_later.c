// preload_later: a process that leaves a child behind which starts a
// program later, after the session may have ended.
//
//   preload_later PROG ARGS...
//
// The parent forks and exits at once. The child waits, making no
// allocation, until a byte arrives on stdin (or stdin closes), then execs
// PROG ARGS...: a program started later by the traced program, with the
// environment it was given at the start.
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid > 0)
		return 0;
	char b;
	while (read(0, &b, 1) < 0)
		;
	execv(argv[1], argv + 1);
	_exit(127);
}
