package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/topframe"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

func init() {
	register(&command{
		name:       "top",
		flagsFirst: true,
		args:       "[flags] NAME | -p PID[,PID...] | -- PROGRAM [ARGS...]",
		summary:    "a live view of a session's heap: live bytes, rates, lost events, the sites growing",
		help: `
heapscope top NAME joins the live session NAME (started by run or attach,
here or in another shell) and leaves it running when it quits. top -p PID
attaches to running processes with eBPF, and top -- PROGRAM launches a
program with the preload provider (its standard input and output are
discarded); a top that started its session stops it when it quits (the
launched program is sent SIGINT) and keeps its trace file, as run and attach do.
It takes their session flags, with their defaults (--unwind tables): run's
for -- PROGRAM, attach's for -p.

Every --interval the view shows the live bytes and blocks, with a sparkline of
the last two minutes, the allocation and free rates, lost events, then the
sites by live bytes with their growth per second over the last interval,
their allocation calls and temporaries. Keys: s cycles the order (or l live,
g growth, c calls, t temporaries), p cycles the process shown (all, then each),
h the thread of that process (all, then each), up/down (k/j) select a site,
enter expands its stack, space pauses, q or Ctrl-C quits.

top asks the session for its per-stack totals every interval (the control
operation "top"); the session keeps them while top asks, from the events it
has in hand, and reads its trace file back once at the first question, so
the totals cover the whole session (a session without a sequential trace
file counts from top's first question); until that is done, top shows how
far it is (bytes, rate, time left). When standard output is not a
terminal, top prints a plain table every interval instead, until the session
ends or Ctrl-C.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var sf sessionFlags
			sf.register(fs, launchFlags|attachFlags)
			var pids pidList
			fs.Var(&pids, "p", "attach to these process ids with eBPF, comma-separated or repeated")
			interval := fs.Duration("interval", time.Second, "refresh interval")
			top := fs.Int("top", 10, "plain table: sites per refresh")
			return func(args []string) error {
				if *interval < 10*time.Millisecond {
					return usagef("--interval must be at least 10ms")
				}
				src, err := openTopSource(&sf, pids, args)
				if err != nil {
					return err
				}
				if isTerminal(os.Stdout) && isTerminal(os.Stdin) {
					return runTopTUI(src, *interval)
				}
				return runTopPlain(src, *interval, *top, os.Stdout)
			}
		},
	})
}

// topSource is the session top shows and how it is left.
type topSource struct {
	name  string
	query topframe.Source
	done  <-chan struct{}       // closed when the session ends
	stop  func() error          // on quit; nil for a joined session
	files func() []string       // the trace files, for the last words
	state func() (string, bool) // a word on the session, and whether it ended
}

func openTopSource(sf *sessionFlags, pids pidList, args []string) (*topSource, error) {
	switch {
	case len(pids) > 0 && len(args) > 0:
		return nil, usagef("give a session NAME, -p PID or -- PROGRAM, not more than one")
	case len(pids) > 0:
		props, err := sf.properties("pid", pids[0], true)
		if err != nil {
			return nil, err
		}
		name := sf.sessionName("top", os.Getpid())
		s, err := heapscope.Start(name, props, pids)
		if err != nil {
			return nil, sf.startError(err)
		}
		return ownSource(s, nil), nil
	case len(args) == 0:
		return nil, usagef("give a session NAME, -p PID or -- PROGRAM")
	}
	// "--" ends the flags; a NAME is one argument that no "--" preceded.
	if len(args) == 1 && !dashDash(rawArgs) {
		return joinSource(args[0])
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return nil, err
	}
	props, err := sf.properties(args[0], os.Getpid(), false)
	if err != nil {
		return nil, err
	}
	if props.Provider != heapscope.ProviderEBPF { // top -- launches with the preload provider
		// As run says it (the full-screen view leaves it on the screen
		// it restores).
		if a, ok, _ := preload.FindPrivateAllocator(path); ok {
			fmt.Fprintf(os.Stderr, "heapscope top: %s\n", a.Warning(args[0]))
		}
	}
	cmd := exec.Command(path, args[1:]...)
	cmd.Args[0] = args[0]
	s, err := heapscope.Launch(sf.sessionName(args[0], os.Getpid()), props, cmd)
	if err != nil {
		return nil, sf.startError(err)
	}
	return ownSource(s, cmd), nil
}

// dashDash reports whether the command's arguments hold "--".
func dashDash(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return true
		}
	}
	return false
}

// ownSource shows a session this process started: its totals are asked of
// it directly, and stay readable once it has ended.
func ownSource(s *heapscope.Session, cmd *exec.Cmd) *topSource {
	return &topSource{
		name:  s.Name(),
		query: s.Top,
		done:  s.Done(),
		files: s.Files,
		stop: func() error {
			err := s.Stop()
			if cmd != nil {
				cmd.Process.Signal(os.Interrupt)
			}
			return err
		},
		state: func() (string, bool) {
			select {
			case <-s.Done():
				return "ended", true
			default:
				return "tracing", false
			}
		},
	}
}

// joinSource shows the live session name, run by another process, through
// its control socket. Once it has ended, the last answer stands.
func joinSource(name string) (*topSource, error) {
	st, err := heapscope.Control(name, heapscope.ControlQuery)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var ended atomic.Bool // set by a query, read by the view
	var last heapscope.TopResult
	var mu sync.Mutex
	return &topSource{
		name: name,
		query: func(q heapscope.TopQuery) (heapscope.TopResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if ended.Load() {
				return last, nil
			}
			r, err := heapscope.Top(name, q)
			if errors.Is(err, heapscope.ErrNotRunning) {
				ended.Store(true)
				close(done)
				last.Ended, last.Elapsed = true, 0
				return last, nil
			}
			last = r
			return r, err
		},
		done:  done,
		files: func() []string { return st.Files },
		state: func() (string, bool) {
			if ended.Load() {
				return "ended", true
			}
			return "joined", false
		},
	}, nil
}

// finish stops a session top started and says where its trace is.
func (src *topSource) finish(w io.Writer) error {
	var err error
	if src.stop != nil {
		err = src.stop()
		fmt.Fprintf(w, "heapscope top: session %q stopped; trace in %s\n", src.name, strings.Join(src.files(), ", "))
	}
	return err
}

// runTopPlain prints a table every interval until the session ends or
// SIGINT/SIGTERM.
func runTopPlain(src *topSource, interval time.Duration, top int, w io.Writer) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	smp := topframe.NewSampler(src.query, interval, symbolize.Options{})
	defer smp.Close()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// The first frame at once: the session's totals begin with it, and a
	// late start reads back more of the trace file.
	done := src.done
	var readFrom *topframe.Frame
	for first, ended := true, false; ; first = false {
		if !first {
			select {
			case <-tick.C:
			case <-done:
				ended, done = true, nil
			case <-sigs:
				return src.finish(os.Stderr)
			}
		}
		f, err := smp.Sample(0, 0, topframe.ByLive, top)
		if err != nil {
			src.finish(os.Stderr)
			return err
		}
		if f.Reading && readFrom == nil {
			readFrom = f
		}
		state, _ := src.state()
		writePlainFrame(w, src.name, state, f, readFrom, top)
		// A session of this process that ended while its trace was read
		// back still answers once that is done; a joined one is gone.
		if ended && (!f.Reading || src.stop == nil) {
			return src.finish(os.Stderr)
		}
	}
}

// readingWord says how far a session's read-back of its trace file is,
// with its rate since from, the first frame of the read-back.
func readingWord(f, from *topframe.Frame) string {
	read := min(f.ReadBytes, f.ReadSize)
	s := fmt.Sprintf("reading the trace back: %s of %s", fmtSize(uint64(read)), fmtSize(uint64(f.ReadSize)))
	if f.ReadSize > 0 {
		s += fmt.Sprintf(" (%d%%)", 100*read/f.ReadSize)
	}
	if from != nil && f.Time.After(from.Time) && read > from.ReadBytes {
		rate := float64(read-from.ReadBytes) / f.Time.Sub(from.Time).Seconds()
		left := time.Duration(float64(f.ReadSize-read) / rate * float64(time.Second)).Round(time.Second)
		s += fmt.Sprintf(", %s/s, %s left", fmtSize(uint64(rate)), left)
	}
	return s
}

func writePlainFrame(w io.Writer, name, state string, f, readFrom *topframe.Frame, top int) {
	if f.Reading {
		fmt.Fprintf(w, "%s  session %q (%s)  %s\n\n", f.Time.Format("15:04:05"), name, state, readingWord(f, readFrom))
		return
	}
	fmt.Fprintf(w, "%s  session %q (%s)  live %s in %s blocks  allocs %.0f/s  frees %.0f/s  lost %s\n",
		f.Time.Format("15:04:05"), name, state, fmtSize(f.Live), fmtNum(f.Blocks), f.Allocs, f.Frees, lostWord(f))
	if note := sampledNote(f); note != "" {
		fmt.Fprintln(w, note)
	}
	fmt.Fprintf(w, "%12s %s%12s %12s %12s  %s\n", "LIVE", lostHead(f), "GROWTH/s", "CALLS", "TEMPORARY", "SITE")
	n := 0
	for i := range f.Sites {
		s := &f.Sites[i]
		if n == top {
			break
		}
		n++
		fmt.Fprintf(w, "%12s %s%12s %12s %12s  %s\n", fmtSize(s.Live), lostCell(f, s), growthWord(s), fmtNum(s.Calls), tempWord(f, s), s.Name())
	}
	fmt.Fprintln(w)
}

// sampledNote says that a sampled session's counts are estimates.
func sampledNote(f *topframe.Frame) string {
	if f.SampleRate <= 0 {
		return ""
	}
	return fmt.Sprintf("estimated (sampled every %s on average)", fmtSize(uint64(f.SampleRate)))
}

func lostWord(f *topframe.Frame) string {
	if !f.HasStats {
		return "?"
	}
	return fmtNum(f.Stats.TotalLost())
}

// tempWord is a site's temporaries, or "–" where the trace cannot tell.
func tempWord(f *topframe.Frame, s *topframe.Site) string {
	if f.NoTemporaries {
		return "–"
	}
	return fmtNum(s.Temporary)
}

func growthWord(s *topframe.Site) string {
	if !s.HasGrowth {
		return "–"
	}
	if s.Growth < 0 {
		return "-" + fmtSize(uint64(-s.Growth))
	}
	return "+" + fmtSize(uint64(s.Growth))
}

// fmtSize writes n bytes in binary units, as the reports do.
func fmtSize(n uint64) string { return report.FormatBytes(n) }

func fmtNum(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// runTopTUI runs the full-screen view.
func runTopTUI(src *topSource, interval time.Duration) error {
	m := &topModel{src: src, smp: topframe.NewSampler(src.query, interval, symbolize.Options{}), interval: interval}
	defer m.smp.Close()
	p := tea.NewProgram(m)
	_, err := p.Run()
	ferr := src.finish(os.Stderr)
	if errors.Is(err, tea.ErrInterrupted) {
		err = nil // SIGINT from elsewhere: as q
	}
	if err != nil {
		return err
	}
	if m.err != nil {
		return m.err
	}
	return ferr
}

// lostHead and lostCell are the LOST column, there once a leak check
// (heapscope leaks) classified the session's blocks: what of LIVE it found
// definitely or indirectly lost.
func lostHead(f *topframe.Frame) string {
	if !f.Scanned {
		return ""
	}
	return fmt.Sprintf("%12s ", "LOST")
}

func lostCell(f *topframe.Frame, s *topframe.Site) string {
	if !f.Scanned {
		return ""
	}
	return fmt.Sprintf("%12s ", fmtSize(s.Lost))
}
