// preload_threads: many short-lived threads, in waves.
//
//   preload_threads WAVES PER_WAVE K
//
// Each wave starts PER_WAVE threads that each call site_thread K times
// (malloc(40) then free), and joins them before the next wave.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;
static long k;
volatile long calls; // code after each call: no tail calls

__attribute__((noinline)) void site_thread(void)
{
	void *p = malloc(40);
	sink = p;
	free(p);
	calls++;
}

static void *worker(void *arg)
{
	for (long i = 0; i < k; i++)
		site_thread();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int waves = atoi(argv[1]), per = atoi(argv[2]);
	k = atol(argv[3]);
	if (per < 1 || per > 256)
		return 2;
	pthread_t t[256];
	for (int w = 0; w < waves; w++) {
		for (int i = 0; i < per; i++)
			if (pthread_create(&t[i], NULL, worker, NULL) != 0)
				return 1;
		for (int i = 0; i < per; i++)
			pthread_join(t[i], NULL);
	}
	return 0;
}
