// preload_daemon: a child that outlives its parent and allocates late.
//
//   preload_daemon K
//
// The parent forks and exits at once. The child waits until its parent has
// exited, sleeps 500 ms more, then mallocs K blocks of 5555 bytes
// (site_daemon) and exits. It allocates nothing before that.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void *volatile sink;

__attribute__((noinline)) void site_daemon(long k)
{
	for (long i = 0; i < k; i++)
		sink = malloc(5555);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	long k = atol(argv[1]);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid > 0)
		return 0;
	struct timespec ms = {0, 1000000};
	while (getppid() == parent)
		nanosleep(&ms, NULL);
	struct timespec half = {0, 500000000};
	nanosleep(&half, NULL);
	site_daemon(k);
	return 0;
}
