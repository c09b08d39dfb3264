// watch_exit: a process for internal/stopped's Watch tests: it ends in the
// ways a program can, and does what a watched program pays for.
//
// It starts 3 threads that wait in pause(2), prints
//
//   ready PID marker=ADDR
//
// (marker is a word holding 0x5a5a5a5a12345678, which the tests read at the
// exit), then takes commands on standard input, one a line:
//   s N   raise SIGUSR1 N times (a handler counts them); prints "signals N"
//   t N   creates and joins N threads; prints "threads N"
//   z     stops itself (SIGSTOP); prints "continued" once SIGCONT came
//   e     executes itself with the argument "again" (the new image prints
//         "ready" again and takes commands)
//   x     exit(5), the 3 threads still waiting
//   _     _exit(6)
//   a     abort()
//   m     the main thread calls pthread_exit; the others exit(7) later
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile uint64_t marker = 0x5a5a5a5a12345678ull;
static volatile int handled;
static volatile int last_exit;

static void on_usr1(int sig) { handled++; }

static void *waiter(void *arg)
{
	for (;;) {
		pause();
		if (last_exit) {
			usleep(100000);
			exit(7);
		}
	}
	return NULL;
}

static void *nothing(void *arg) { return arg; }

static void on_usr2(int sig) { last_exit = 1; }

int main(int argc, char **argv)
{
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	pthread_t w[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&w[i], NULL, waiter, NULL);
	printf("ready %d marker=%p\n", getpid(), (void *)&marker);
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		int n = 0;
		switch (line[0]) {
		case 's':
			n = atoi(line + 2);
			handled = 0;
			for (int i = 0; i < n; i++)
				raise(SIGUSR1);
			printf("signals %d\n", handled);
			break;
		case 't':
			n = atoi(line + 2);
			for (int i = 0; i < n; i++) {
				pthread_t t;
				pthread_create(&t, NULL, nothing, NULL);
				pthread_join(t, NULL);
			}
			printf("threads %d\n", n);
			break;
		case 'z':
			raise(SIGSTOP);
			printf("continued\n");
			break;
		case 'e':
			fflush(stdout);
			execl("/proc/self/exe", argv[0], "again", (char *)NULL);
			printf("exec failed\n");
			break;
		case 'x':
			exit(5);
		case '_':
			_exit(6);
		case 'a':
			abort();
		case 'm':
			for (int i = 0; i < 3; i++)
				pthread_kill(w[i], SIGUSR2);
			pthread_exit(NULL);
		}
		fflush(stdout);
	}
	return 0;
}
