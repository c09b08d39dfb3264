// symbolize_cxx: C++ frames (a namespace, a class, a template, an operator)
// for the symbolizer's demangling tests. Lines the tests check carry a marker
// comment, LINE:name.
//
//   symbolize_cxx
//
// It prints its stack as return addresses, innermost first ("pc N 0xADDR",
// N = 0 for the return address in capture's caller), then "ready", and waits
// for stdin to close.
#include <execinfo.h>
#include <stdio.h>
#include <unistd.h>

void *volatile sink; // keeps GCC from deleting the allocations

__attribute__((noinline)) static void capture() {
	void *pcs[32];
	int n = backtrace(pcs, 32);
	for (int i = 1; i < n; i++)
		printf("pc %d %p\n", i - 1, pcs[i]);
}

namespace ns {

struct Widget {
	int v;
	static Widget *make(int v);
	template <typename T> Widget *operator+(T x) const;
};

__attribute__((noinline)) Widget *Widget::make(int v) {
	Widget *w = new Widget{v};
	sink = w;
	capture(); // LINE:make
	return w;
}

template <typename T> __attribute__((noinline)) Widget *Widget::operator+(T x) const {
	Widget *w = make(v + static_cast<int>(x)); // LINE:plus
	sink = w;
	return w;
}

} // namespace ns

int main() {
	ns::Widget base{1};
	ns::Widget *w = base + 2L; // LINE:main
	sink = w;
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	delete w;
	return 0;
}
