// preload_signal: allocations inside signal handlers.
//
//   preload_signal N
//
// N times: the main thread mallocs and frees blocks of 24 bytes in a loop
// (so that it is, most of the time, inside the interposer's hook) while a
// second thread sends it SIGUSR1; the handler mallocs a block of 4321
// bytes and frees it. The loop gives up after 20000 rounds and waits for
// the signal instead, so that a slow sender does not make a flood. Prints
// "handled N" at the end.
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *volatile sink;
static volatile sig_atomic_t handled;
static long n;
static pthread_t main_thread;
static sem_t go;

__attribute__((noinline)) void site_handler(void)
{
	void *p = malloc(4321);
	sink = p;
	free(p);
}

static void on_signal(int sig)
{
	(void)sig;
	site_handler();
	handled++;
}

static void *sender(void *arg)
{
	(void)arg;
	for (long i = 0; i < n; i++) {
		while (sem_wait(&go) != 0)
			;
		// let the main thread get well into its loop: the signal lands
		// at a point of it, not at its sem_post
		struct timespec us = {0, 100000};
		nanosleep(&us, NULL);
		pthread_kill(main_thread, SIGUSR1);
	}
	return NULL;
}

__attribute__((noinline)) void site_loop(void)
{
	void *p = malloc(24);
	sink = p;
	free(p);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	n = atol(argv[1]);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sem_init(&go, 0, 0);
	main_thread = pthread_self();
	pthread_t t;
	if (pthread_create(&t, NULL, sender, NULL) != 0)
		return 1;
	for (long i = 0; i < n; i++) {
		sem_post(&go);
		for (int k = 0; handled == i && k < 20000; k++)
			site_loop();
		while (handled == i) {
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
		}
	}
	pthread_join(t, NULL);
	printf("handled %d\n", (int)handled);
	return 0;
}
