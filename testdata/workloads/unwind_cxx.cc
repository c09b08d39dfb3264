// unwind_cxx: std::string allocations made inside libstdc++ (built without
// frame pointers) for the program's own functions, meant to be built with
// -O2 -fomit-frame-pointer. make_name's strings are the top allocation site;
// leak_names keeps 3000+ of them to the end, more than libstdc++'s emergency
// pool: the top leak.
#include <string>
#include <vector>

std::vector<std::string> *volatile keep;

__attribute__((noinline)) std::string make_name(int i)
{
	std::string s = "a name long enough to need the heap, number ";
	s += std::to_string(i);
	s += " and then some more text to grow it";
	return s;
}

__attribute__((noinline)) void fill(std::vector<std::string> &v, int n)
{
	for (int i = 0; i < n; i++)
		v.push_back(make_name(i));
}

__attribute__((noinline)) void leak_names(int n)
{
	auto *v = new std::vector<std::string>;
	fill(*v, n);
	keep = v;
}

int main(int argc, char **)
{
	for (int r = 0; r < 20; r++) {
		std::vector<std::string> tmp;
		fill(tmp, 2000);
	}
	leak_names(3000 + argc);
	return 0;
}
