// census_known: a heap whose every live block the program knows, for the
// census tests. It allocates blocks of several sizes from the main thread and
// frees some in a pattern that fragments (tcache, fastbins and bins all get
// chunks), starts threads that each allocate and free from an arena of their
// own (one grows past a heap, so its arena has two), makes mmapped chunks
// (one aligned, whose chunk does not start its mapping), C++ objects of known
// classes, strings, and a block that holds another. Then it prints, without
// allocating (rawout.h), one line per live block:
//
//	b ADDR USABLE KIND
//
// (ADDR is what malloc returned, USABLE malloc_usable_size, KIND "-", a
// class name, "string" or "holder"), one line per thread ("t TID"),
// mallinfo2() ("m arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks
// fordblks keepcost"), and "ready", and waits for a line on stdin before it
// exits. The threads wait too, so their tcaches stay. With the argument
// "overflow" it also overwrites a chunk header, as a heap overflow does, and
// prints the chunk's address ("c ADDR"); with "small", no arena grows past
// one heap (for the fuzz test's copy of the heap).
//
// The C++ runtime's emergency exception pool, a block the program cannot
// list, is freed first (__gnu_cxx::__freeres, which exists for leak checkers).
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "parked.h"
#include "rawout.h"

namespace __gnu_cxx {
void __freeres();
}

enum { maxRecs = 1 << 16, nThreads = 4 };

struct rec {
	void *p;
	size_t usable;
	const char *kind;
};

static rec recs[maxRecs];
static int nrecs;
static pthread_mutex_t recMu = PTHREAD_MUTEX_INITIALIZER;

static void keep(void *p, const char *kind)
{
	if (!p)
		_exit(3);
	pthread_mutex_lock(&recMu);
	if (nrecs == maxRecs)
		_exit(5);
	recs[nrecs++] = rec{p, malloc_usable_size(p), kind};
	pthread_mutex_unlock(&recMu);
}

// drop frees p and forgets it.
static void drop(void *p)
{
	pthread_mutex_lock(&recMu);
	for (int i = nrecs - 1; i >= 0; i--)
		if (recs[i].p == p) {
			recs[i] = recs[--nrecs];
			break;
		}
	pthread_mutex_unlock(&recMu);
	free(p);
}

// fill writes into a block so that its pages are resident, as a program's
// data would be, and so that no block starts with text by chance.
static void fill(void *p, size_t n)
{
	memset(p, 0xa5, n);
}

struct Shape {
	virtual ~Shape() {}
	virtual double area() const = 0;
};

struct Circle : Shape {
	double r = 1;
	double area() const override { return 3.14159 * r * r; }
};

namespace census_test {
struct Widget : Shape {
	long id = 7;
	char name[40] = {};
	double area() const override { return 0; }
};
} // namespace census_test

struct Printable {
	virtual void print() const {}
	virtual ~Printable() {}
};

// Both has two bases with vtables: its first word points at the primary one.
struct Both : Circle, Printable {
	int x = 3;
};

struct Holder {
	void *child;
	size_t n;
};

static bool small; // "small": no thread grows past a heap
static pid_t tids[nThreads];

static void *worker(void *arg)
{
	long id = (long)arg;
	tids[id] = (pid_t)syscall(SYS_gettid);
	enum { n = 300 };
	void *ps[n];
	for (int i = 0; i < n; i++) {
		size_t sz = 24 + 40 * ((i * 7 + id) % 25);
		ps[i] = malloc(sz);
		fill(ps[i], sz);
		keep(ps[i], "-");
	}
	for (int i = 0; i < n; i += 2)
		drop(ps[i]);
	if (id == 1 && !small) {
		// 90 MiB in blocks under the mmap threshold: more than one heap
		// (64 MiB each) holds this arena.
		enum { big = 900 };
		static void *bs[big];
		for (int i = 0; i < big; i++) {
			bs[i] = malloc(100000);
			fill(bs[i], 100000);
			keep(bs[i], "-");
		}
		for (int i = 10; i < big; i += 50)
			drop(bs[i]); // free chunks in both heaps, in bins
	}
	park();
	return 0;
}

static char *volatile sink;

int main(int argc, char **argv)
{
	bool overflow = argc > 1 && strcmp(argv[1], "overflow") == 0;
	small = argc > 1 && strcmp(argv[1], "small") == 0;
	__gnu_cxx::__freeres();

	static const size_t sizes[] = {16, 24, 40, 56, 100, 120, 200, 500, 1000, 3000, 10000, 70000};
	enum { per = 40 };
	static void *ps[sizeof sizes / sizeof sizes[0]][per];
	for (int round = 0; round < per; round++)
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
			ps[s][round] = malloc(sizes[s]);
			fill(ps[s][round], sizes[s]);
			keep(ps[s][round], "-");
		}
	// Free one in three: seven of each size go to the tcache, the small
	// ones' rest to fastbins, the others' to the unsorted bin and, after
	// the next allocation sorts it, to small and large bins.
	enum { firstLarge = 6 }; // sizes[6] = 200 is past the fastbins' 120
	for (size_t s = firstLarge; s < sizeof sizes / sizeof sizes[0]; s++)
		for (int i = 1; i < per; i += 3)
			drop(ps[s][i]);
	void *sort = malloc(5000); // sorts the unsorted bin
	fill(sort, 5000);
	keep(sort, "-");

	for (int i = 0; i < 10; i++) {
		Circle *c = new Circle;
		keep(c, "Circle");
	}
	for (int i = 0; i < 6; i++) {
		census_test::Widget *w = new census_test::Widget;
		keep(w, "census_test::Widget");
	}
	for (int i = 0; i < 4; i++) {
		Both *b = new Both;
		keep(b, "Both");
	}
	static const char *const texts[] = {"census: a string block", "GET /index.html HTTP/1.1",
	                                    "the quick brown fox jumps over the lazy dog"};
	for (const char *t : texts) {
		char *s = strdup(t);
		keep(s, "string");
	}
	Holder *h = (Holder *)malloc(sizeof(Holder));
	h->n = 4096;
	h->child = malloc(h->n);
	fill(h->child, h->n);
	keep(h, "holder");
	keep(h->child, "-");

	// mmapped chunks: above the mmap threshold, one of them aligned so
	// that its chunk starts past the start of its mapping.
	for (int i = 0; i < 3; i++) {
		void *p = malloc(200000 + 4096 * i);
		fill(p, 200000);
		keep(p, "-");
	}
	void *c = calloc(1, 500000);
	keep(c, "-");
	void *al;
	if (posix_memalign(&al, 1 << 16, 300000) != 0)
		_exit(6);
	fill(al, 300000);
	keep(al, "-");

	// Every allocation of a large size consolidates the fastbins: the
	// small ones are freed after the last.
	for (size_t s = 0; s < firstLarge; s++)
		for (int i = 1; i < per; i += 3)
			drop(ps[s][i]);

	// "overflow": a heap overflow, as a program's bug makes one: a write
	// past the end of a 3000-byte block clobbers the header of the chunk
	// after it (a live 10000-byte block's), which the census must report
	// and walk past.
	uintptr_t clobbered = 0;
	if (overflow) {
		char *b = (char *)ps[9][0];
		size_t n = malloc_usable_size(b);
		clobbered = (uintptr_t)b + n - 8;
		memset(b, 0xa5, n + 16);
	}

	pthread_t th[nThreads];
	start_parked(th, nThreads, worker);

	for (int i = 0; i < nrecs; i++) {
		puts_("b");
		hex((uintptr_t)recs[i].p);
		hex(recs[i].usable);
		puts_(" ");
		puts_(recs[i].kind);
		puts_("\n");
	}
	if (clobbered) {
		puts_("c");
		hex(clobbered);
		puts_("\n");
	}
	puts_("t");
	hex((uintptr_t)getpid());
	puts_("\n");
	for (int i = 0; i < nThreads; i++) {
		puts_("t");
		hex((uintptr_t)tids[i]);
		puts_("\n");
	}
	struct mallinfo2 mi = mallinfo2();
	puts_("m");
	const size_t mv[] = {mi.arena, mi.ordblks, mi.smblks, mi.hblks, mi.hblkhd, mi.usmblks, mi.fsmblks, mi.uordblks,
	                     mi.fordblks, mi.keepcost};
	for (size_t v : mv)
		hex(v);
	puts_("\nready\n");
	flush();
	wait_line();

	unpark_all(th, nThreads);
	sink = (char *)h;
	return 0;
}
