// inject_cxx: a C++ program that waits to be attached to, then works with
// the standard library's containers, strings and exceptions and prints
// what it computed, for heapscope attach --inject's tests: its output and
// exit status must be the same traced or not.
//
//   inject_cxx     prints "ready", reads a line, works, prints, exits 7
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

struct Node {
	std::string name;
	std::vector<std::unique_ptr<Node>> kids;
	explicit Node(std::string n) : name(std::move(n)) {}
};

static std::unique_ptr<Node> tree(int depth, int fan, const std::string &prefix) {
	auto n = std::make_unique<Node>(prefix);
	if (depth > 0)
		for (int i = 0; i < fan; i++)
			n->kids.push_back(tree(depth - 1, fan, prefix + "." + std::to_string(i)));
	return n;
}

static size_t count(const Node &n) {
	size_t c = n.name.size();
	for (auto &k : n.kids)
		c += count(*k);
	return c;
}

int main() {
	std::cout << "ready" << std::endl;
	std::string line;
	std::getline(std::cin, line);
	std::map<std::string, std::vector<int>> m;
	std::unordered_map<int, std::string> u;
	unsigned long sum = 0;
	for (int i = 0; i < 100000; i++) {
		m[std::to_string(i % 5000)].push_back(i);
		u[i] = std::string(i % 64, 'x');
	}
	for (auto &kv : m)
		sum += kv.second.size() * kv.first.size();
	for (auto &kv : u)
		sum += kv.second.size();
	int caught = 0;
	for (int i = 0; i < 2000; i++) {
		try {
			if (i % 3 == 0)
				throw std::runtime_error("odd " + std::to_string(i));
			auto v = std::make_shared<std::vector<double>>(i % 100, 1.5);
			sum += v->size();
		} catch (const std::exception &e) {
			caught++;
			sum += std::string(e.what()).size();
		}
	}
	auto t = tree(6, 4, "root");
	sum += count(*t);
	std::cout << "sum " << sum << " caught " << caught << std::endl;
	return 7;
}
