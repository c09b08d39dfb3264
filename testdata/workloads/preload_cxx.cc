// preload_cxx: C++ operator new and delete, scalar and array, from main,
// and an operator new that throws, caught, after which main allocates again.
#include <cstddef>
#include <cstdio>
#include <new>

struct Obj {
	char pad[48];
};

Obj *volatile obj_sink;
int *volatile arr_sink;
char *volatile huge_sink;

int main()
{
	Obj *o = new Obj;       // operator new(48)
	obj_sink = o;
	int *a = new int[25];   // operator new[](100)
	arr_sink = a;
	Obj *n = new (std::nothrow) Obj; // nothrow new(48)
	obj_sink = n;
	delete o;
	delete[] a;
	delete n;
	try {
		// the real operator new[] (through operator new) fails to allocate
		// and throws std::bad_alloc through the interposer's wrappers
		volatile std::size_t huge = std::size_t(1) << 62;
		huge_sink = new char[huge];
		return 1;
	} catch (const std::bad_alloc &) {
	}
	Obj *after = new Obj; // still traced after the exception
	obj_sink = after;
	delete after;
	return 0;
}
