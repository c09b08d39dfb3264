package heapscope

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// ForwardSignals relays SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this
// process to the program Launch started, until stop is called: a program
// that launches another under tracing ends as the shell would end it, and
// the session still records the program's last events. A SIGINT or SIGQUIT
// typed at the terminal already reached the program when both are in the
// terminal's foreground process group; it is not sent a second time. For a
// session that launched nothing, ForwardSignals relays nothing.
func (s *Session) ForwardSignals() (stop func()) {
	s.mu.Lock()
	child := s.child
	s.mu.Unlock()
	if child == nil {
		return func() {}
	}
	p := child.Process
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				if (sig == unix.SIGINT || sig == unix.SIGQUIT) && inForeground() {
					continue
				}
				p.Signal(sig)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// inForeground reports whether this process is in its controlling terminal's
// foreground process group, where the terminal's signals go to all of it.
func inForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}
