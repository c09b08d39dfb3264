// parked.h: worker threads that do their part, then park until main lets
// them go, for the census workloads (census_known, census_rundown,
// census_bench): each thread's arena and blocks stay as they were while the
// census reads them.
#ifndef HEAPSCOPE_PARKED_H
#define HEAPSCOPE_PARKED_H

#include <pthread.h>
#include <unistd.h>

static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cond = PTHREAD_COND_INITIALIZER;
static int parked, parked_quit;

// park is a worker's last step: it counts itself parked and waits until
// unpark_all.
static void park(void)
{
	pthread_mutex_lock(&parked_mu);
	parked++;
	pthread_cond_broadcast(&parked_cond);
	while (!parked_quit)
		pthread_cond_wait(&parked_cond, &parked_mu);
	pthread_mutex_unlock(&parked_mu);
}

// start_parked starts n threads, thread i running fn((void *)i), and waits
// until each has parked; it exits with status 7 if one cannot start.
static void start_parked(pthread_t *th, long n, void *(*fn)(void *))
{
	for (long i = 0; i < n; i++)
		if (pthread_create(&th[i], 0, fn, (void *)i) != 0)
			_exit(7);
	pthread_mutex_lock(&parked_mu);
	while (parked < n)
		pthread_cond_wait(&parked_cond, &parked_mu);
	pthread_mutex_unlock(&parked_mu);
}

// unpark_all lets the n threads of th go and joins them.
static void unpark_all(pthread_t *th, long n)
{
	pthread_mutex_lock(&parked_mu);
	parked_quit = 1;
	pthread_cond_broadcast(&parked_cond);
	pthread_mutex_unlock(&parked_mu);
	for (long i = 0; i < n; i++)
		pthread_join(th[i], 0);
}

#endif
