// preload_cxx: C++ operator new and delete, scalar and array, from main.
#include <cstdio>
#include <new>

struct Obj {
	char pad[48];
};

Obj *volatile obj_sink;
int *volatile arr_sink;

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
	return 0;
}
