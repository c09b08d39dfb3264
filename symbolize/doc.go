// Package symbolize turns addresses in traced processes into functions,
// source files and lines, from ELF symbols and DWARF, offline, from a trace's
// module records.
//
// A Symbolizer is given the module records of each process (AddModule) and
// resolves return addresses to frames (Frames), innermost first, with the
// calls inlined at the address.
//
// # What a frame is called, and which stacks are one site
//
// The package also holds the one definition of a frame's vocabulary that
// every consumer uses (report, query and serve, top, the diff): a frame's
// one-word name (Frame.Name), its identity within a trace (Frame.Key,
// SiteKey) and across traces (Frame.DiffKey, DiffSiteKey), and which frames
// at the top of a stack are the allocator's own (TrimAllocator): a site is
// a stack without them, by its frames' keys.
//
// # The DWARF reader
//
// The package has its own DWARF reader rather than debug/dwarf: it reads
// one compilation unit, one line table and one function at a time, as
// addresses fall in them, which for a C library's megabytes of DWARF is
// faster to the first address and allocates a fraction of what reading
// every unit's abbreviations up front does. Its contract:
//
// Supported:
//   - ELF files (the tests cover x86-64); names from .symtab and .dynsym
//     where there is no DWARF;
//   - DWARF 5 and DWARF 4 (.debug_info, .debug_abbrev, .debug_line,
//     .debug_str, .debug_line_str, .debug_aranges, .debug_ranges and
//     .debug_rnglists, .debug_addr, .debug_str_offsets); 64-bit DWARF and
//     units of versions 2 and 3 are parsed by the same code, but no test
//     covers them;
//   - compressed sections: ELF SHF_COMPRESSED with zlib or zstd
//     (gcc -gz, objcopy --compress-debug-sections), and the older .zdebug_*
//     sections (zlib-gnu), decompressed as a stream, keeping only the parts
//     needed;
//   - separate debug files, by build-id under each debug root
//     (ROOT/.build-id/xx/yyyy.debug, as Debian's -dbg and -dbgsym packages
//     install them) and by .gnu_debuglink (next to the file, in its .debug
//     directory, and under each root), checked by build-id, or by the
//     link's CRC-32 when there is none;
//   - inlined calls (DW_TAG_inlined_subroutine, through abstract origins
//     and specifications, across units), each a Frame with Inlined set;
//   - names qualified by their namespaces and classes, and C++ (Itanium)
//     and Rust (legacy and v0) linkage names demangled, as addr2line -C
//     does (clone suffixes dropped).
//
// Not supported (the frame then has what the rest gives: a symbol name,
// or the module and offset):
//   - split DWARF (.dwo files and .dwp packages): skeleton and split units
//     are skipped, and their code gets names from the symbol table;
//   - dwz supplementary files (.gnu_debugaltlink, DW_FORM_GNU_ref_alt and
//     DW_FORM_GNU_strp_alt, DWARF 5 .debug_sup): names held there are
//     missing;
//   - MiniDebugInfo (.gnu_debugdata, an LZMA-compressed symbol table) and
//     debuginfod: debug files must be on disk;
//   - column numbers, discriminators, variables and locations: a frame is a
//     function, a file and a line;
//   - formats other than ELF (Mach-O, PE).
//
// The reader is checked against independent tools: TestAgainstReferences
// compares every frame of the test workloads' stacks, in the executable and
// in libc through libc6-dbg's debug file found by build-id, and TestSweep
// compares every fifth byte of the text of gcc -g programs (-O0, -O3 with
// DWARF 4, C++) and a stretch of libc.so.6 around malloc.c, each address
// with binutils' addr2line -a -f -i -C and LLVM's llvm-symbolizer: each
// frame must match one of them exactly. TestCompressed, TestDWARF4,
// TestDebugLink, TestBuildIDDir and TestRust cover the cases above one by
// one.
//
// # Mismatched files and bad input
//
// A module record names its file and build-id. A file whose build-id is not
// the record's is another build and is not used: its debug file, found by
// the record's build-id, is used alone if it can be found, and Warnings says
// so either way.
//
// Nothing a file holds can make the Symbolizer panic or lose a frame: what it
// cannot read is a warning, and an address it cannot resolve is a frame with
// its module and offset, or its address alone (TestCorruptFile,
// TestHugeSizes).
package symbolize
