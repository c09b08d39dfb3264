// Package scan classifies live heap blocks by reachability, as Memcheck and
// LeakSanitizer do: given the blocks (address, size), a reader of the
// memory they live in and the roots (address ranges to scan conservatively,
// and register values), it says of each block whether it is definitely
// lost, indirectly lost, possibly lost or still reachable.
//
// It is pure: it knows nothing of ptrace or of a provider. Package
// scan/roots gathers the roots of a process stopped by internal/stopped.
//
// Every pointer-sized, aligned word of the roots, and of the blocks found
// reachable, that points into a live block (at its start, or inside it; a
// zero-sized block only at its start) is a reference to it. Words of the
// roots that lie inside a live block are not roots: blocks are reached only
// through references (a root range may overlap the heap when the kernel
// merges neighbouring anonymous mappings).
//
// # Classes
//
// With Memcheck's rules (the default; valgrind's mc_leakcheck.c):
//   - still reachable: a chain of start pointers leads to it from a root;
//   - possibly lost: reached, but only through a pointer into its interior
//     somewhere on every chain (a block that only a possibly lost block
//     points to is possibly lost too);
//   - definitely lost: no reference from a root or a reached block;
//   - indirectly lost: not reached, but referenced (at its start or inside)
//     from a definitely or indirectly lost block. Lost blocks are taken in
//     address order; each one not yet marked leads a clique and marks every
//     unmarked lost block it leads to as indirectly lost, a former leader
//     included. In a lost cycle, so, one block (the first by address, or
//     the one a block outside the cycle leads to) is definitely lost and the
//     others indirectly.
//
// Memcheck's heuristics (its default, --leak-check-heuristics=all) make some
// interior pointers count as start pointers: stdstring (a pointer 3 words
// in, after a length and a capacity that fit the block), length64 (a pointer
// 8 bytes in, after the block's length less 8) and newarray (a pointer one
// word in, after an element count that divides the rest). The fourth,
// multipleinheritance, needs to know which words point at vtables (it reads
// the mappings' code), and is not implemented: such blocks are possibly
// lost here where Memcheck says reachable.
//
// With LeakSanitizer's rules (Options.Rules = LeakSanitizer; lsan_common.cpp):
//   - any reference, interior or not, makes a block reachable: there is no
//     possibly lost;
//   - a block not reached is indirectly lost when another block not reached
//     references it, otherwise definitely ("directly") lost. Both blocks of
//     a lost cycle are indirectly lost, and no block of it is direct.
//
// # Unreadable memory
//
// A root that cannot be read, or a reached block whose contents cannot, may
// hide references: then every block not found still reachable is
// Unclassified, and Result.Unread says what was not read. A lost block that
// cannot be read may hide references to other lost blocks: it and the
// definitely lost blocks (which it could make indirect) are Unclassified;
// indirectly lost blocks stay as they are, since more references only ever
// turn definite into indirect. No class is given that more memory could
// change.
//
// # Cost
//
// The blocks are sorted once by address; that sorted slice is the index
// (there is no hash table; the project has one, for its model). A word is
// first checked against the heap's range. While marking, the words that
// pass are gathered in batches of a million, sorted (radix, 16 bits a
// pass) and merged with the sorted blocks, galloping over the blocks no
// word points into: a batch walks the index in order, where looking words
// up one by one costs a cache miss each, several times the sort. The
// phases after marking (Memcheck's cliques, LeakSanitizer's indirect
// leaks), whose order matters and which only lost blocks feed, look words
// up one by one: a range of at most a few blocks found through a bucket
// table over the address space, then a binary search.
//
// The blocks' contents are read once, in spans of neighbouring blocks, into
// one buffer as large as the live heap (mapped with huge pages asked for;
// up to four readers at once, as io.ReaderAt allows, each populating its
// part of the buffer before it copies), and the roots before the marking
// begins:
// Options.AfterRead then lets a stopped process go before the
// classification, so that it is stopped only while its memory is copied.
package scan
