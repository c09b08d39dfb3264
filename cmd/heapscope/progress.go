package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heapscope/heapscope/tracefile"
)

// progress shows, on standard error when it is a terminal, how much of the
// trace files a command has read: bytes of the total, the rate and the time
// left, once the work has taken more than progressDelay. On a terminal it
// also makes Ctrl-C clear its line before the command dies of the signal.
// A nil *progress (stderr not a terminal) does nothing.
type progress struct {
	w     io.Writer
	verb  string // what the work is called ("reading" when "")
	label string
	total int64
	read  atomic.Int64
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	sigs  chan os.Signal
}

// progressDelay is how long work runs before progress is shown: quick
// commands print nothing.
const progressDelay = time.Second

// startProgress starts a meter of the work (verb: "reading") on the files
// at paths, or returns nil when standard error is not a terminal.
func startProgress(verb string, paths ...string) *progress {
	if !isTerminal(os.Stderr) {
		return nil
	}
	return newProgress(os.Stderr, verb, paths...)
}

func newProgress(w io.Writer, verb string, paths ...string) *progress {
	p := &progress{w: w, verb: verb, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), sigs: make(chan os.Signal, 1)}
	for i, path := range paths {
		if fi, err := os.Stat(path); err == nil {
			p.total += fi.Size()
		}
		if i > 0 {
			p.label += " and "
		}
		p.label += filepath.Base(path)
	}
	signal.Notify(p.sigs, os.Interrupt, syscall.SIGTERM)
	go p.run()
	return p
}

// add counts n bytes read; safe from any goroutine.
func (p *progress) add(n int64) {
	if p != nil {
		p.read.Add(n)
	}
}

// counter is add, or nil for a nil meter (report.LoadOptions.ReadProgress).
func (p *progress) counter() func(int64) {
	if p == nil {
		return nil
	}
	return p.add
}

// finish stops the meter and clears its line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
	signal.Stop(p.sigs)
}

// clearLine clears the meter's line, which the next tick draws again: for
// a message printed while the meter runs.
func (p *progress) clearLine() {
	if p != nil {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

func (p *progress) run() {
	defer close(p.done)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	shown := false
	for {
		select {
		case <-p.stop:
			if shown {
				fmt.Fprint(p.w, "\r\x1b[K")
			}
			return
		case sig := <-p.sigs:
			// Stop at once, as without the meter, but leave a clean line.
			if shown {
				fmt.Fprint(p.w, "\r\x1b[K")
			}
			signal.Stop(p.sigs)
			syscall.Kill(os.Getpid(), sig.(syscall.Signal))
			return
		case now := <-tick.C:
			if now.Sub(p.start) < progressDelay {
				continue
			}
			shown = true
			fmt.Fprint(p.w, "\r\x1b[K"+p.line(now))
		}
	}
}

// line is the meter's text at now.
func (p *progress) line(now time.Time) string {
	read := p.read.Load()
	elapsed := now.Sub(p.start).Seconds()
	rate := float64(read) / elapsed
	verb := p.verb
	if verb == "" {
		verb = "reading"
	}
	s := fmt.Sprintf("%s %s: %s", verb, p.label, fmtSize(uint64(read)))
	if p.total > 0 {
		// Definitions are read again by each decoding worker: the count
		// may pass the size.
		done := min(read, p.total)
		s = fmt.Sprintf("%s %s: %s of %s (%d%%)", verb, p.label, fmtSize(uint64(done)), fmtSize(uint64(p.total)), done*100/p.total)
		if rate > 0 && done < p.total {
			left := time.Duration(float64(p.total-done) / rate * float64(time.Second)).Round(time.Second)
			return s + fmt.Sprintf(", %s/s, %s left", fmtSize(uint64(rate)), left)
		}
		if done == p.total {
			return s + ", analysing"
		}
	}
	return s + fmt.Sprintf(", %s/s", fmtSize(uint64(rate)))
}

// openCounted opens a trace whose reads p counts. Close the file after the
// reader.
func openCounted(path string, p *progress) (*tracefile.Reader, io.Closer, error) {
	if p == nil {
		r, err := tracefile.Open(path)
		return r, io.NopCloser(nil), err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("tracefile: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("tracefile: %w", err)
	}
	r, err := tracefile.NewReader(countingFile{f, p}, fi.Size())
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, f, nil
}

type countingFile struct {
	f *os.File
	p *progress
}

func (c countingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.f.ReadAt(b, off)
	c.p.add(int64(n))
	return n, err
}
