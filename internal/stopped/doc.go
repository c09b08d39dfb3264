// Package stopped stops every thread of a process, reads its memory, its
// threads' registers and its mappings, and lets it run again: the one home
// of "stop a process safely and look at it" for the heap scanner, the census
// of glibc's heap and the injector.
//
// Stop seizes each thread with PTRACE_SEIZE and stops it with
// PTRACE_INTERRUPT; it never sends a signal, so the target's job-control
// state is its own: a process already in a group stop (SIGSTOP) is still in
// it after Resume, a signal sent during the stop takes effect after it, and
// one a thread was about to take when it stopped is handed back at Resume. Every ptrace request comes from one goroutine locked to an OS
// thread of its own (the kernel's tracer is a thread), and that thread exits
// at Resume.
//
// A Watch keeps a process seized while it runs: to hold its end for a leak
// check (WatchOptions.OnExit), and, with WatchOptions.Follow, to trace the
// children it forks from their first instruction and keep the eBPF
// provider's holds of them in ptrace stops their parent cannot see
// (WatchOptions.Held, Release). A process has one tracer: Stop of a watched
// process goes through its watch.
//
// A stopped process always runs again:
//   - Resume detaches every thread; it is idempotent, and Stop resumes what
//     it stopped when it fails, panics included.
//   - Options.MaxPause resumes the process by itself if its caller does not.
//   - When heapscope dies (SIGKILL, or SIGINT and SIGTERM, whose default
//     action ends it), the kernel releases every thread it had seized: a
//     tracer's exit detaches its tracees (exit_ptrace), and a thread in an
//     interrupt stop runs again. The tests kill a helper process
//     that holds a stop and check that every thread runs again, so no
//     watchdog process is needed. A program that catches SIGINT or SIGTERM
//     keeps control of its own code: its deferred Resume, or MaxPause, ends
//     the stop.
//
// The thread layout it reads (registers, fs base) is x86-64's.
package stopped
