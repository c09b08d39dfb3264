// ebpf_holds: a process that the eBPF tracer keeps stopping, for the tests
// that kill the tracer while it holds a process stopped.
//
//   ebpf_holds fork           forks a child every 5 ms (the tracer holds
//                             each at its fork); the child allocates and
//                             exits, the parent waits for it
//   ebpf_holds dlopen LIB     dlopens and dlcloses LIB every 5 ms (the
//                             tracer holds it each time its loader adds the
//                             library)
//
// It prints "ready", then loops for a minute and exits 0.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void *volatile sink;

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	int forks = strcmp(argv[1], "fork") == 0;
	if (!forks && argc < 3)
		return 2;
	printf("ready\n");
	fflush(stdout);
	time_t end = time(NULL) + 60;
	while (time(NULL) < end) {
		if (forks) {
			pid_t pid = fork();
			if (pid == 0) {
				sink = malloc(64);
				free(sink);
				_exit(0);
			}
			if (pid > 0)
				waitpid(pid, NULL, 0);
		} else {
			void *h = dlopen(argv[2], RTLD_NOW);
			if (!h) {
				fprintf(stderr, "%s\n", dlerror());
				return 1;
			}
			dlclose(h);
		}
		usleep(5000);
	}
	return 0;
}
