// scan_exec: a chain of execs from a second thread, for internal/stopped's
// test of a process that executes a new program while it is being stopped.
//
//   scan_exec N
//
// While N > 0 it starts a thread that spins a little and then executes
// this program again with N-1 (the exec, from a thread that is not the
// leader, ends the other threads and makes the execing thread the leader);
// at 0 it prints "done" and exits 0.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char **args;

static void *execer(void *arg)
{
	for (volatile long i = 0; i < 2000000; i++)
		;
	char n[16];
	snprintf(n, sizeof n, "%d", atoi(args[1]) - 1);
	execl("/proc/self/exe", args[0], n, (char *)NULL);
	perror("execl");
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	if (atoi(argv[1]) <= 0) {
		printf("done\n");
		return 0;
	}
	args = argv;
	pthread_t t;
	pthread_create(&t, NULL, execer, NULL);
	for (;;)
		pause();
}
