#!/bin/sh
# Builds the interposer, libheapscope_preload.so, from csrc/ (run by
# `go generate` in internal/preload). The output depends only on the sources
# and the compiler, not on where the checkout is: no debug info, relative
# file names, a build-id hashed from the contents. CI rebuilds it and requires
# the committed file to be byte-identical.
set -eu
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
out=libheapscope_preload.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# -fno-omit-frame-pointer: the wrappers' own frames start the stack walk.
# -fexceptions: C++ exceptions thrown by the real operator new unwind through
#   our wrapper and run its cleanup.
# -ftls-model=initial-exec: the library is preloaded, so its TLS is static.
# --exclude-libs: nothing from libgcc is exported.
$CC -std=gnu11 -O2 -g0 -fPIC -shared \
	-fvisibility=hidden -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
	-fexceptions -ftls-model=initial-exec -fno-strict-aliasing \
	-Wall -Wextra -Werror -Wno-unused-parameter \
	-ffile-prefix-map="$PWD"=. \
	-Wl,--build-id=sha1 -Wl,-z,now -Wl,-z,relro -Wl,--hash-style=gnu \
	-Wl,-soname,$out -Wl,--exclude-libs,ALL \
	-o "$tmp/$out" csrc/heapscope_preload.c
if ! cmp -s "$tmp/$out" "$out"; then
	cp "$tmp/$out" "$out.tmp"
	mv "$out.tmp" "$out"
fi
