// Package census reads the heap of glibc's malloc from outside a process:
// every chunk of every arena, the mmapped chunks, each thread's tcache, the
// fastbins and the bins, each chunk with its address, size and state (in
// use, free in a bin, in a tcache, in a fastbin, the top chunk, mmapped). It
// is what was live before heapscope attached, which no tracer sees, and
// what makes up a process's RSS.
//
// # Use
//
//	l, err := census.Open(pid, maps, census.Options{}) // while it runs: files only
//	... stop every thread (internal/stopped) ...
//	r, err := l.Read(census.Target{PID: pid, Mem: p, Maps: p.Maps(), Threads: threads}, census.TakeOptions{RSS: true})
//	... resume ...
//	c := r.Finish()                                   // the free lists, the states: no more reads
//	c.Live()                                          // the blocks live at the stop
//	c.Describe(census.NewNamer(pid, maps, mem), nil)  // by size class and what they are
//	c.RSS()                                           // the RSS, explained
//
// TakeProcess does all of it, stopping the process again when malloc was
// busy (below). Read reads only through the Target: nothing here stops,
// resumes or traces a process.
//
// # Where glibc keeps its heap
//
// Nothing is taken from numbers written here that the DWARF can give. Open
// finds the libc the process maps (libc.so.6), its build-id, and its
// separate debug file by build-id (ROOT/.build-id/xx/yyyy.debug, as
// libc6-dbg installs it, under /usr/lib/debug and the process's root). From
// the debug file's full symbol table (.symtab, where they are local): main_arena, mp_, the
// thread-local tcache, tcache_key and __libc_version (read from libc's
// .rodata); from its DWARF (debug/dwarf): the offsets and sizes of the
// members of malloc_chunk, malloc_state, malloc_par, _heap_info,
// tcache_perthread_struct, tcache_entry, ld.so's link_map, r_debug and
// tcbhead_t, and the code ranges of malloc.c's unit. A member missing, or of
// an unexpected size, refuses the layout. What the DWARF cannot say (SIZE_SZ,
// MALLOC_ALIGNMENT, MINSIZE, HEAP_MAX_SIZE, the flag bits, safe-linking,
// what fenceposts look like) is the code's, checked against glibc 2.36
// only: another version is errs.ErrNoLayout. So is a libc without a debug
// file (install libc6-dbg), a statically linked one, and a stripped one;
// there is no fallback layout, because without the debug file the symbols
// the walk starts from (main_arena, mp_, tcache) are not there either.
// jemalloc, tcmalloc and mimalloc (mapped, or linked into the executable),
// and musl, are errs.ErrNotSupported.
//
// A thread's tcache pointer is thread-local: on x86-64 (TLS variant II) a
// thread's block of libc's thread-local variables starts l_tls_offset bytes
// below its thread pointer (fs_base), so the pointer is at fs_base −
// l_tls_offset + the tcache symbol's value (its offset in libc's TLS
// segment). l_tls_offset is read from libc's link_map in the process: the
// list of loaded objects starts at ld.so's _r_debug.r_map, and libc's
// entry is the one whose l_ld is libc's dynamic section.
//
// # The walk
//
//   - The main arena: from mp_.sbrk_base (aligned as malloc aligns it) to
//     the end of main_arena.top.
//   - The other arenas: main_arena.next, round to main_arena again. Each
//     has heaps at multiples of HEAP_MAX_SIZE (4 × mp_.hp_pagesize with
//     glibc.malloc.hugetlb); the newest holds its top chunk, and each
//     _heap_info's prev leads to the one before. A heap's chunks start
//     after its _heap_info, and after the arena's malloc_state in its
//     first heap; an old heap ends with two fenceposts.
//   - Mmapped chunks: each is a mapping of its own, its header at its
//     start (or prev_size bytes into it for an aligned block, memalign
//     leaving the old header in place), but the kernel merges neighbouring
//     anonymous mappings into one line of the maps. The walk looks at the
//     start of each anonymous mapping that is no arena's and right after
//     each chunk it finds; if that finds fewer than mp_.n_mmaps chunks and
//     mp_.mmapped_mem bytes, it looks at every page of the rest that the
//     process has written (pagemap) until it has them all. A difference
//     left is a problem.
//   - A chunk is in use when the next chunk's PREV_INUSE is set and it is on
//     no tcache or fastbin list; free chunks (PREV_INUSE clear) must be on
//     a bin. The lists are walked from the arenas' fastbinsY and bins and
//     from each thread's tcache_perthread_struct; tcache and fastbin links
//     are safe-linked (stored ^ (address >> 12)).
//
// Read walks the heaps (several at once) with windows of 256 KiB, or header
// by header where chunks average 4 KiB or more, and keeps each chunk's
// first two words; Finish follows the lists through them, with the
// process running again. Everything is bounded by the mappings: no walk
// steps past its heap, no list is followed for more steps than the heap
// has chunks, every list stops at a chunk it has seen.
//
// # Corrupted heaps and busy malloc
//
// What does not check out is a Problem, where it is found, never a guess:
// a header whose size cannot be (below MINSIZE, not aligned, past the end of
// the heap, marked mmapped in an arena) stops the walk of its heap, the
// chunk before it is Unknown, and the walk resumes at the next chunk a free
// list names (the problem says how many bytes were not walked); a list
// that points outside the heap's chunks, a chunk on two lists, a free chunk
// on no bin, a bk that does not point back, a tcache count that is not its
// list's length, a chunk of the wrong size for its bin, mp_'s mmapped
// counts not found.
//
// A process stopped at an arbitrary moment may be inside malloc: Census.Busy
// names the threads stopped in malloc.c's code and the arenas whose mutex
// was held. Such a census can show a chunk mid-change; TakeProcess keeps it
// only when every check holds, and otherwise lets the process run a
// millisecond or more and stops it again (DefaultTries times at most),
// keeping the census with the fewest problems and saying so.
//
// # What the blocks are
//
// Describe groups allocated blocks by size class (glibc's: 16 bytes apart
// below 1 KiB, its large bins up to 768 KiB, powers of two above) and by
// what they are: a C++ object when its first word is an address point
// (offset to top 0) of a vtable, named by the vtable's symbol (_ZTV…, from
// .symtab or .dynsym of any mapped module, demangled) or, in a stripped
// module, by the type_info the vtable points at (checked to be one, by its
// own vtable's being __cxxabiv1's, its name a mangled type that demangles);
// a string when it starts with printable text (4 bytes ended by a NUL or
// the block's end, or 16); libc's own blocks (each thread's tcache, the
// thread vectors of the threads it created). Who holds each block is a
// hook (Holders) for the heap scanner (package scan) to fill.
//
// # RSS explained
//
// With TakeOptions.RSS, Read first reads /proc/PID/smaps and smaps_rollup,
// and which pages of each writable anonymous mapping are resident
// (/proc/PID/pagemap, the kernel's zero page told apart by its frame
// number, which needs CAP_SYS_ADMIN): before the walk, whose reads map the
// zero page where the program never wrote. RSS then gives each resident
// byte of the heap to its chunk's part (in use, overhead, free in bins,
// fastbins, tcaches, top, mmapped), page by page: those lines are
// measured. The rest of each anonymous mapping's smaps RSS is other
// anonymous memory, and file-backed mappings' RSS is split by
// Private_Dirty: measured too. The parts add up to smaps' RSS by
// construction; RSS.Disagreement says by how much the pages counted in the
// heap's mappings exceeded smaps' count there (0 when exact). PSS is
// split in each mapping in proportion to RSS (exact where PSS equals RSS,
// as in a process that did not fork). RSS.Trimmable estimates what
// malloc_trim(0) would give back. The census counts a chunk's bytes
// whether or not they are resident: free space malloc never touched is in
// a line's Bytes and not in its Rss.
package census
