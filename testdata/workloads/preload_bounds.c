// preload_bounds: what it costs a new thread to learn its stack's bounds,
// by each way the interposer could ask (csrc/ring.h's stack_bounds asks the
// kernel; glibc's pthread_getattr_np cannot be called from a heap hook).
//
//   preload_bounds THREADS MAPPINGS
//
// It first makes MAPPINGS extra mappings (as a JVM or a big server has),
// then, for each way, starts THREADS threads one after another, each timing
// one query from its entry, and prints "WAY ns_per_thread" lines:
//   getattr  pthread_getattr_np + pthread_attr_getstack (the old way)
//   query    PROCMAP_QUERY on /proc/self/maps (open, ioctl, close)
//   parse    reading /proc/self/maps with read(2) and a hand parser
// The query and parse code mirrors mapping_of and maps_find in ring.h.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct procmap_query_ {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};

static int parse(int fd, uintptr_t addr, uintptr_t *lo, uintptr_t *hi)
{
	char buf[2048];
	uint64_t v[2] = {0, 0};
	int field = 0;
	for (;;) {
		long n = syscall(SYS_read, fd, buf, sizeof buf);
		if (n <= 0)
			return 0;
		for (long i = 0; i < n; i++) {
			char c = buf[i];
			if (c == '\n') {
				if (field == 2 && v[0] <= addr && addr < v[1]) {
					*lo = v[0];
					*hi = v[1];
					return 1;
				}
				v[0] = v[1] = 0;
				field = 0;
			} else if (field < 2) {
				int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
				if (d >= 0)
					v[field] = v[field] << 4 | (uint64_t)d;
				else
					field = c == '-' && field == 0 ? 1 : 2;
			}
		}
	}
}

static int way; // 0 getattr, 1 query, 2 parse
static long long total_ns;
static volatile uintptr_t sink;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *worker(void *arg)
{
	(void)arg;
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0), lo = 0, hi = 0;
	long long t0 = now();
	if (way == 0) {
		pthread_attr_t a;
		if (pthread_getattr_np(pthread_self(), &a) == 0) {
			void *addr;
			size_t size;
			if (pthread_attr_getstack(&a, &addr, &size) == 0) {
				lo = (uintptr_t)addr;
				hi = lo + size;
			}
			pthread_attr_destroy(&a);
		}
	} else {
		int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			struct procmap_query_ q;
			memset(&q, 0, sizeof q);
			q.size = sizeof q;
			q.query_addr = sp;
			if (way == 1 && syscall(SYS_ioctl, fd, 0xC0686611UL, &q) == 0) {
				lo = q.vma_start;
				hi = q.vma_end;
			} else if (way == 2) {
				parse(fd, sp, &lo, &hi);
			}
			syscall(SYS_close, fd);
		}
	}
	total_ns += now() - t0;
	if (!(lo <= sp && sp < hi)) {
		fprintf(stderr, "way %d: %#lx not in [%#lx, %#lx)\n", way, (unsigned long)sp, (unsigned long)lo,
		        (unsigned long)hi);
		exit(1);
	}
	sink = hi;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int threads = atoi(argv[1]), maps = atoi(argv[2]);
	for (int i = 0; i < maps; i++) // alternate protections: no two merge
		if (mmap(NULL, 4096, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
		    MAP_FAILED)
			return 1;
	static const char *names[] = {"getattr", "query", "parse"};
	for (way = 0; way < 3; way++) {
		total_ns = 0;
		for (int i = 0; i < threads; i++) {
			pthread_t t;
			if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0)
				return 1;
		}
		printf("%s %.0f\n", names[way], (double)total_ns / threads);
	}
	return 0;
}
