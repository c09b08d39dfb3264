// census_mallinfo: a library the census tests preload into real programs
// (sqlite3, gdb) to ask them what their own malloc counts: on SIGUSR1 it
// writes mallinfo2() to standard error, as one line
//
//	m arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost
//
// in hex, without allocating. mallinfo2 takes the arenas' locks: the tests
// signal the program only while it waits for input, holding none.
#include <malloc.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static char *hex(char *p, size_t v)
{
	char b[20];
	int i = sizeof b;
	do {
		b[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	*p++ = ' ';
	memcpy(p, b + i, sizeof b - i);
	return p + sizeof b - i;
}

static void on_usr1(int sig)
{
	(void)sig;
	struct mallinfo2 mi = mallinfo2();
	const size_t v[] = {mi.arena, mi.ordblks, mi.smblks, mi.hblks, mi.hblkhd, mi.usmblks, mi.fsmblks, mi.uordblks,
	                    mi.fordblks, mi.keepcost};
	char line[512], *p = line;
	*p++ = 'm';
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		p = hex(p, v[i]);
	*p++ = '\n';
	ssize_t n = write(2, line, p - line);
	(void)n;
}

__attribute__((constructor)) static void init(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, 0);
}
