// report_runtime: a C++ program whose own leaks are known exactly, and which
// makes the C and C++ runtimes keep memory for the life of the process, as
// they do by design: libstdc++'s emergency exception pool (allocated when
// libstdc++ is loaded), a stdio buffer, NSS's caches (getpwuid), the time
// zone (localtime), the dynamic loader's link maps (dlopen), and an
// exception thrown and caught. For the report's default suppressions.
//
//   own_leak:        malloc(5000), never freed              (leaked 5000 in 1)
//   own_string_leak: new std::string(3000, 'x'), never freed (leaked 32 + 3001 in 2)
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <dlfcn.h>
#include <pwd.h>
#include <stdexcept>
#include <string>

void *volatile sink; // keeps GCC from deleting the allocations
std::string *volatile string_sink;

__attribute__((noinline)) void own_leak() { sink = malloc(5000); }

__attribute__((noinline)) void own_string_leak() { string_sink = new std::string(3000, 'x'); }

int main()
{
	own_leak();
	own_string_leak();
	printf("hello from report_runtime\n");
	fflush(stdout);
	sink = getpwuid(0);
	time_t t = 0;
	sink = localtime(&t);
	sink = dlopen("libm.so.6", RTLD_NOW);
	try {
		throw std::runtime_error("caught");
	} catch (const std::exception &) {
	}
	return 0;
}
