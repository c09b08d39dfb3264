/*
 * protocol.h: what the interposer (heapscope_preload.c) and the Go collector
 * (package preload) share: the socket messages, the session's control block
 * and the layout of a per-thread ring and its records.
 *
 * protocol.go is generated from the HS_ defines here by go generate
 * (internal/protogen: integers, strings and expressions of earlier names;
 * HS_FUNC_*, HS_FAM_*, HS_KIND_* and HS_HEAP_* are checked against package event at
 * compile time). Bump HS_VERSION when the format changes.
 *
 * Everything is little-endian x86-64; offsets are fixed, not left to the
 * compiler, so that Go can read them without cgo.
 */
#ifndef HEAPSCOPE_PROTOCOL_H
#define HEAPSCOPE_PROTOCOL_H

#include <stdint.h>

#define HS_MAGIC 0x31505348u /* "HSP1" */
#define HS_VERSION 4u

/* Environment of a traced process. */
#define HS_ENV_SOCKET "HEAPSCOPE_PRELOAD_SOCKET" /* the collector's socket */
#define HS_ENV_LIB "HEAPSCOPE_PRELOAD_LIB"       /* this library's path, as put in LD_PRELOAD */
#define HS_ENV_PREFIX "HEAPSCOPE_PRELOAD_"
/* The effective uid of the collector: the interposer connects only to a
 * socket in a directory it owns (or root owns), with no group or other
 * write, and only to a peer running as it (or root) (SO_PEERCRED). */
#define HS_ENV_UID "HEAPSCOPE_PRELOAD_UID"

/*
 * Socket messages (AF_UNIX, SOCK_SEQPACKET). A process sends HELLO when it
 * starts being traced and gets WELCOME with the control block's fd; then one
 * RING message, with the ring's memfd, for each ring it creates.
 */
#define HS_MSG_HELLO 1u
#define HS_MSG_WELCOME 2u
#define HS_MSG_RING 3u

#define HS_MSG_CHILDREN 4u /* a process that forked names its children (see struct hs_children) */

/*
 * Unwind tables (--unwind tables). The interposer makes a SOCK_SEQPACKET
 * socketpair and sends one end in a TABLES message (struct hs_ring_msg,
 * index 0). On that channel it asks for the table of a loaded file
 * (TABLE_REQ) and the collector answers each request with a TABLE message:
 * status 0 with the table's sealed memfd (F_SEAL_WRITE|SHRINK|GROW; the
 * format of unwind/FORMAT.md), otherwise no table (fall back). The main
 * socket carries nothing new.
 */
#define HS_MSG_TABLES 5u
#define HS_MSG_TABLE_REQ 6u
#define HS_MSG_TABLE 7u

struct hs_table_req { /* followed by id_len bytes of build-id, then path_len bytes of path */
	uint32_t magic;    /* 0 */
	uint32_t version;  /* 4 */
	uint32_t type;     /* 8: HS_MSG_TABLE_REQ */
	uint32_t id_len;   /* 12: 1..HS_BUILD_ID_MAX */
	uint32_t path_len; /* 16: 1..HS_MODULE_PATH_MAX */
	uint32_t reserved; /* 20 */
};
#define HS_TABLE_REQ_SIZE 24

struct hs_table_msg { /* with the table's memfd as SCM_RIGHTS when status is 0 */
	uint32_t magic;    /* 0 */
	uint32_t version;  /* 4 */
	uint32_t type;     /* 8: HS_MSG_TABLE */
	uint32_t status;   /* 12: 0 = table attached; otherwise none for this file */
	uint32_t id_len;   /* 16 */
	uint32_t reserved; /* 20 */
	uint8_t id[64];    /* 24: the build-id asked for (HS_BUILD_ID_MAX) */
};
#define HS_TABLE_MSG_SIZE 88

/*
 * NOTE: something the interposer has to tell the user (it never writes to
 * the program's streams): the collector records it in the trace as a
 * warning and heapscope prints it. The code names it; the collector has
 * the words.
 */
#define HS_MSG_NOTE 8u

struct hs_note {          /* followed by path_len bytes of path */
	uint32_t magic;    /* 0 */
	uint32_t version;  /* 4 */
	uint32_t type;     /* 8: HS_MSG_NOTE */
	uint32_t code;     /* 12: HS_NOTE_* */
	uint32_t pid;      /* 16: the process it is about (a vfork child names itself) */
	uint32_t path_len; /* 20: 0..HS_NOTE_PATH_MAX */
};
#define HS_NOTE_SIZE 24
#define HS_NOTE_PATH_MAX 4096
#define HS_NOTE_DEEPBIND 1u    /* dlopen with RTLD_DEEPBIND: the flag was dropped */
#define HS_NOTE_SETID_EXEC 2u  /* about to exec path, a set-ID program the loader runs without LD_PRELOAD */
#define HS_NOTE_EXEC_FAILED 3u /* the exec announced returned: it failed */
#define HS_NOTE_SETID_SPAWN 4u /* posix_spawn started path, a set-ID program, as process pid */

#define HS_HELLO_CONTINUE 1u /* flags: another connection of an image already traced */
#define HS_HELLO_TRUNCATED 2u /* flags: exe or cmdline was cut to fit */

struct hs_hello {        /* followed by exe_len bytes of exe, then cmdline_len bytes of cmdline */
	uint32_t magic;       /* 0 */
	uint32_t version;     /* 4 */
	uint32_t type;        /* 8: HS_MSG_HELLO */
	uint32_t flags;       /* 12 */
	uint32_t pid;         /* 16 */
	uint32_t ppid;        /* 20 */
	int64_t mono_ns;      /* 24: CLOCK_MONOTONIC when tracing began */
	uint32_t exe_len;     /* 32 */
	uint32_t cmdline_len; /* 36: NUL-separated argv, as /proc/PID/cmdline */
	uint32_t heap;        /* 40: HS_HEAP_*: the allocator the process's malloc is */
	uint32_t reserved;    /* 44 */
};
#define HS_HELLO_SIZE 48
#define HS_HELLO_MAX (64 * 1024) /* whole message */

struct hs_welcome {  /* with the control block's memfd as SCM_RIGHTS */
	uint32_t magic;   /* 0 */
	uint32_t version; /* 4 */
	uint32_t type;    /* 8: HS_MSG_WELCOME */
	uint32_t status;  /* 12: 0 = trace; otherwise run untraced */
};
#define HS_WELCOME_SIZE 16

struct hs_ring_msg { /* with the ring's memfd as SCM_RIGHTS */
	uint32_t magic;   /* 0 */
	uint32_t version; /* 4 */
	uint32_t type;    /* 8: HS_MSG_RING */
	uint32_t index;   /* 12: the ring's number within the process */
};
#define HS_RING_MSG_SIZE 16

/*
 * CHILDREN: sent by a traced process right after each fork (from its
 * atfork handler, before fork returns), naming the live children of the
 * forking thread, so that the collector knows of a child before its first
 * allocation, even if its parent exits first. The collector counts a child
 * it has not yet heard from as live until it connects or exits.
 */
struct hs_children { /* followed by count uint32_t PIDs */
	uint32_t magic;   /* 0 */
	uint32_t version; /* 4 */
	uint32_t type;    /* 8: HS_MSG_CHILDREN */
	uint32_t count;   /* 12 */
};
#define HS_CHILDREN_SIZE 16
#define HS_CHILDREN_MAX 256

/*
 * The control block: one page, shared by the collector and every traced
 * process of the session. The configuration is written before any process
 * connects; state changes live.
 */
#define HS_CTL_MAGIC 0      /* u32 */
#define HS_CTL_VERSION 4    /* u32 */
#define HS_CTL_FAMILIES 8   /* u32: event.Family bits */
#define HS_CTL_UNWIND 12    /* u32: HS_UNWIND_* */
#define HS_CTL_MAX_FRAMES 16 /* u32: 1..HS_MAX_FRAMES */
#define HS_CTL_RING_SIZE 20 /* u32: data bytes per ring, a power of two */
#define HS_CTL_ON_FULL 24   /* u32: HS_ON_FULL_* */
#define HS_CTL_CLOCK 28     /* u32: HS_CLOCK_* */
#define HS_CTL_SAMPLE_RATE 32 /* u64: sample one allocation per this many bytes on average; 0 = every event */
#define HS_CTL_SAMPLE_SEED 40 /* u64: seeds the sampling PRNG of every thread (tests); 0 = from the clock */
#define HS_CTL_EMIT_USDT 56 /* u32: 1 = fire the otel_memory USDT probes for sampled blocks (usdt.inc) */
#define HS_CTL_STATE 64     /* u32, own cache line: read on every event */
#define HS_CTL_DOORBELL 128 /* u32 futex: bumped to wake a sleeping collector */
#define HS_CTL_SLEEPING 132 /* u32: the collector is (about to be) waiting on the doorbell */
#define HS_CTL_HEARTBEAT 192 /* u64: bumped by the collector while it runs */
#define HS_CTL_SIZE 4096

#define HS_STATE_STACKS 0xffu     /* event.KindSet: kinds that carry a stack */
#define HS_STATE_CLOSED 0x80000000u /* the session ended: stop tracing */

#define HS_UNWIND_FP 0u
#define HS_UNWIND_DWARF 1u
#define HS_UNWIND_TABLES 2u /* unwind tables, libunwind where they have no answer */
#define HS_UNWIND_TABLES_FP 3u /* unwind tables, frame pointers where they have no answer (tests) */
#define HS_ON_FULL_BLOCK 0u
#define HS_ON_FULL_DROP 1u
#define HS_CLOCK_TSC 0u       /* timestamps are rdtsc */
#define HS_CLOCK_MONOTONIC 1u /* timestamps are CLOCK_MONOTONIC ns */

#define HS_MAX_FRAMES 127

/* event.Family bits (package event). */
#define HS_FAM_MALLOC 0x01u
#define HS_FAM_CALLOC 0x02u
#define HS_FAM_REALLOC 0x04u
#define HS_FAM_FREE 0x08u
#define HS_FAM_ALIGNED 0x10u
#define HS_FAM_CXX 0x20u
#define HS_FAM_MMAP 0x40u

/*
 * event.Heap values: the allocator a process's heap events go to, in its
 * HELLO. It is whichever library defines the malloc the interposer forwards
 * to (RTLD_NEXT): glibc, or jemalloc, tcmalloc or mimalloc when the program
 * links or preloads one. mmap events are HeapMmap whatever the allocator.
 */
#define HS_HEAP_LIBC 0
#define HS_HEAP_JEMALLOC 3
#define HS_HEAP_TCMALLOC 4
#define HS_HEAP_MIMALLOC 5

/* event.Kind values, as bits of HS_STATE_STACKS. */
#define HS_KIND_ALLOC 1
#define HS_KIND_REALLOC 2
#define HS_KIND_FREE 3
#define HS_KIND_MMAP 4
#define HS_KIND_MUNMAP 5

/*
 * A ring: one memfd per thread (reused by a later thread once its owner
 * died). The header page holds the indices, the data follows. The producer
 * owns the first cache line, the collector the second. A thread writes
 * nothing into a new ring before the collector merges it (HS_RING_MERGED):
 * until then the collector would not wait for the ring's records, and could
 * deliver later records of other threads before them.
 */
#define HS_RING_HEAD 0      /* u64: bytes published, ever */
#define HS_RING_SEQ 8       /* u64: odd while a record is being written */
#define HS_RING_LAST_TS 16  /* u64: timestamp of the last record published */
#define HS_RING_LOST 24     /* u64: events dropped because the ring was full */
#define HS_RING_WAITING 32  /* u32: the producer waits for space (futex on TAIL) */
#define HS_RING_TAIL 64     /* u64: bytes consumed, ever; futex on its low half */
#define HS_RING_MAGIC 128   /* u32 */
#define HS_RING_SIZE 132    /* u32: data bytes */
#define HS_RING_MERGED 136  /* u32 futex: the collector set it to 1 once the ring is in its merge, 2 if it refused it */
#define HS_RING_DATA 4096   /* data offset */

#define HS_RING_MIN (16 * 1024)
#define HS_RING_MAX (1u << 30)

/*
 * Records: a sequence of 8-byte words. Word 0 is the header: type in bits
 * 0-7, the record's length in words in bits 8-31, an argument in bits 32-63
 * (the stack id of an event, the id of a stack, the tid of a thread). Word 1
 * is the timestamp, except in PAD. A record never wraps: PAD fills the end of
 * the ring when the next record does not fit there.
 *
 * Event types are event.Func values:
 *   alloc-like (malloc, calloc, aligned family, new): [hdr][ts][addr][size]
 *   realloc, reallocarray:                            [hdr][ts][addr][size][old]
 *   mremap:                                           [hdr][ts][addr][size][old][oldsize]
 *   free, delete:                                     [hdr][ts][addr]
 *   mmap, munmap:                                     [hdr][ts][addr][size]
 */
#define HS_FUNC_MALLOC 1
#define HS_FUNC_CALLOC 2
#define HS_FUNC_REALLOC 3
#define HS_FUNC_REALLOCARRAY 4
#define HS_FUNC_FREE 5
#define HS_FUNC_POSIX_MEMALIGN 6
#define HS_FUNC_ALIGNED_ALLOC 7
#define HS_FUNC_MEMALIGN 8
#define HS_FUNC_VALLOC 9
#define HS_FUNC_PVALLOC 10
#define HS_FUNC_NEW 11
#define HS_FUNC_NEW_ARRAY 12
#define HS_FUNC_DELETE 13
#define HS_FUNC_DELETE_ARRAY 14
#define HS_FUNC_MMAP 15
#define HS_FUNC_MUNMAP 16
#define HS_FUNC_MREMAP 17
#define HS_MAX_FUNC HS_FUNC_MREMAP /* the last event type */

#define HS_REC_PAD 0x80    /* [hdr]: skip the record's words */
#define HS_REC_STACK 0x81  /* [hdr: id][ts][frame]...: innermost first */
#define HS_REC_MODULE 0x82 /* [hdr][ts][start][end][offset][path_len | id_len<<32][path, build-id bytes, zero padded] */
#define HS_REC_THREAD 0x83 /* [hdr: tid][ts]: the ring now belongs to thread tid */

#define HS_MODULE_PATH_MAX 4096
#define HS_BUILD_ID_MAX 64

/*
 * heapscope attach --inject (internal/inject and inject.inc): the injector
 * loads this library into a running process with dlopen and then calls its
 * entry points, by name, in a thread it stopped:
 *   HS_INJECT_OPEN() makes a socketpair and returns the injector's end (a
 *     descriptor of the process, which the injector takes with
 *     pidfd_getfd), or -HS_INJ_*;
 *   HS_INJECT_START(args) closes that end, says HELLO on the other as a
 *     launched process does, redirects the allocation functions' GOT
 *     entries and starts the watcher thread; 0 or -HS_INJ_*;
 *   HS_INJECT_STOP(args) puts the entries back and closes the socket
 *     (HS_INJ_STOP_RESTORE), and, called again with every other thread
 *     stopped outside the library, unmaps the rings (HS_INJ_STOP_RELEASE).
 * The args are HS_INJ_ARGS_SIZE bytes at the offsets HS_INJ_ARG_*.
 * HS_INJECT_STATE names the library's state (HS_INJ_STATE_*), for the
 * injector to read.
 */
#define HS_INJECT_OPEN "heapscope_inject_open"
#define HS_INJECT_START "heapscope_inject_start"
#define HS_INJECT_STOP "heapscope_inject_stop"
#define HS_INJECT_STATE "heapscope_inject_state"

#define HS_INJ_ARG_MAGIC 0    /* u32: HS_MAGIC */
#define HS_INJ_ARG_VERSION 4  /* u32: HS_VERSION */
#define HS_INJ_ARG_PEER 8     /* i32: start: the descriptor heapscope_inject_open returned */
#define HS_INJ_ARG_FLAGS 12   /* u32: stop: HS_INJ_STOP_* */
#define HS_INJ_ARG_ENTRIES 16 /* u32, out: GOT entries redirected (start) or put back (stop) */
#define HS_INJ_ARG_MODULES 20 /* u32, out: modules looked at */
#define HS_INJ_ARG_ERRNO 24   /* i32, out: the errno of what failed */
#define HS_INJ_ARGS_SIZE 32

/* stop's two steps: first the entries go back (any thread may be inside a
 * wrapper, finishing its call), then, with no thread inside the library,
 * the rings go */
#define HS_INJ_STOP_RESTORE 1
#define HS_INJ_STOP_RELEASE 2

#define HS_INJ_BUSY 1      /* another session (a live collector) traces the process */
#define HS_INJ_PRELOADED 2 /* this copy was preloaded by heapscope run, not injected */
#define HS_INJ_SOCKET 3    /* the socketpair could not be made (errno) */
#define HS_INJ_ARGS 4      /* the arguments are not this version's */
#define HS_INJ_HANDSHAKE 5 /* the collector did not answer */
#define HS_INJ_THREAD 6    /* the watcher thread could not start (errno) */
#define HS_INJ_NOT_OPEN 7  /* start without open */

#define HS_INJ_STATE_MAGIC 0    /* u32: HS_MAGIC */
#define HS_INJ_STATE_VERSION 4  /* u32: HS_VERSION */
#define HS_INJ_STATE_ACTIVE 8   /* u32: 1 while a session traces the process */
#define HS_INJ_STATE_WATCHER 12 /* i32: the watcher thread's ID, 0 when none runs */
#define HS_INJ_STATE_ENTRIES 16 /* u32: GOT entries redirected now */
#define HS_INJ_STATE_SESSIONS 20 /* u32: sessions started in the process */
#define HS_INJ_STATE_SIZE 24

#endif
