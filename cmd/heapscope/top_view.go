package main

import (
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/heapscope/heapscope/internal/topframe"
)

// topModel is the full-screen view of `heapscope top`. One sample is in
// flight at a time (request), so the sampler is never used by two
// goroutines; the next tick is scheduled when a frame arrives.
type topModel struct {
	src      *topSource
	smp      *topframe.Sampler
	interval time.Duration

	frame    *topframe.Frame
	readFrom *topframe.Frame // the first frame of a read-back, for its rate
	order    topframe.Order
	pid      uint32 // the process shown; 0: all
	tid      uint32 // the thread of pid shown; 0: all
	sel      int    // the selected site, in the sorted list
	expanded bool
	paused   bool
	ended    bool
	err      error
	width    int
	height   int

	inflight bool // a sample is being taken
	again    bool // the view changed meanwhile: sample again when it arrives
	gen      int  // the current tick; older ticks are dropped
}

type tickMsg struct{ gen int }

type frameMsg struct {
	f     *topframe.Frame
	ended bool
	err   error
}

// topSites is how many sites the view asks for: enough to scroll a tall
// terminal's worth.
const topSites = 200

func (m *topModel) sampleCmd() tea.Cmd {
	src, smp, pid, tid, order := m.src, m.smp, m.pid, m.tid, m.order
	return func() tea.Msg {
		f, err := smp.Sample(pid, tid, order, topSites)
		_, ended := src.state()
		return frameMsg{f, ended, err}
	}
}

// request samples now, or once the sample in flight arrives.
func (m *topModel) request() tea.Cmd {
	if m.inflight {
		m.again = true
		return nil
	}
	m.inflight = true
	return m.sampleCmd()
}

// tick starts a new tick; any earlier one is dropped when it comes.
func (m *topModel) tick() tea.Cmd {
	m.gen++
	gen := m.gen
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{gen} })
}

func (m *topModel) Init() tea.Cmd { return m.request() }

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tickMsg:
		if msg.gen != m.gen {
			return m, nil
		}
		if m.paused || m.ended {
			return m, m.tick()
		}
		return m, m.request()
	case frameMsg:
		m.inflight = false
		if msg.err != nil {
			m.err = msg.err
			return m, tea.Quit
		}
		if m.again || msg.f.PID != m.pid || msg.f.TID != m.tid {
			// A key changed the view while this was taken.
			m.again = false
			if m.frame == nil || msg.f.PID == m.pid && msg.f.TID == m.tid {
				m.frame = msg.f
				m.frame.Sort(m.order)
			}
			return m, m.request()
		}
		if msg.f.Reading && (m.frame == nil || !m.frame.Reading) {
			m.readFrom = msg.f
		}
		// A session of this process that ended while its trace was read
		// back still answers once that is done; a joined one is gone.
		m.frame, m.ended = msg.f, msg.ended && (!msg.f.Reading || m.src.stop == nil)
		m.frame.Sort(m.order)
		m.sel = min(m.sel, max(0, len(m.frame.Sites)-1))
		return m, m.tick()
	case tea.KeyPressMsg:
		return m, m.key(msg.String())
	}
	return m, nil
}

// key acts on a key press.
func (m *topModel) key(k string) tea.Cmd {
	resort := func(o topframe.Order) {
		m.order = o
		if m.frame != nil {
			m.frame.Sort(o)
		}
		m.sel = 0
	}
	// now asks for a frame of the new view at once, unless paused; the
	// pending tick asks again.
	now := func() tea.Cmd {
		if m.paused || m.ended {
			return nil
		}
		return m.request()
	}
	switch k {
	case "q", "ctrl+c", "esc":
		return tea.Quit
	case "s":
		resort(m.order.Next())
		return now()
	case "l":
		resort(topframe.ByLive)
		return now()
	case "g":
		resort(topframe.ByGrowth)
		return now()
	case "c":
		resort(topframe.ByCalls)
		return now()
	case "t":
		resort(topframe.ByTemporary)
		return now()
	case "p", "tab":
		m.pid, m.tid = m.nextPID(), 0
		m.sel = 0
		return now()
	case "h", "H":
		m.pid, m.tid = m.nextTID()
		m.sel = 0
		return now()
	case "up", "k":
		m.sel = max(0, m.sel-1)
	case "down", "j":
		if m.frame != nil {
			m.sel = min(len(m.frame.Sites)-1, m.sel+1)
		}
	case "enter", "e":
		m.expanded = !m.expanded
	case "space", " ":
		m.paused = !m.paused
	}
	return nil
}

// nextTID cycles the threads of the process shown: all → each thread →
// all. With every process shown, it picks the first process's first
// thread.
func (m *topModel) nextTID() (pid, tid uint32) {
	if m.frame == nil || len(m.frame.PIDs) == 0 {
		return m.pid, 0
	}
	pid = m.pid
	if pid == 0 {
		pid = m.frame.PIDs[0]
	}
	tids := m.frame.TIDs
	if m.frame.PID != pid {
		// The process's threads are known at its first frame.
		return pid, 0
	}
	if m.tid == 0 {
		if len(tids) == 0 {
			return pid, 0
		}
		return pid, tids[0]
	}
	for i, t := range tids {
		if t == m.tid && i+1 < len(tids) {
			return pid, tids[i+1]
		}
	}
	return pid, 0
}

// nextPID cycles all → each process → all.
func (m *topModel) nextPID() uint32 {
	if m.frame == nil || len(m.frame.PIDs) == 0 {
		return 0
	}
	pids := m.frame.PIDs
	if m.pid == 0 {
		return pids[0]
	}
	for i, p := range pids {
		if p == m.pid && i+1 < len(pids) {
			return pids[i+1]
		}
	}
	return 0
}

var sparkChars = []rune("▁▂▃▄▅▆▇█")

// sparkline draws the last width values, scaled to their maximum.
func sparkline(vs []uint64, width int) string {
	if len(vs) > width {
		vs = vs[len(vs)-width:]
	}
	var top uint64
	for _, v := range vs {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range vs {
		i := 0
		if top > 0 {
			i = int(v * uint64(len(sparkChars)-1) / top)
		}
		b.WriteRune(sparkChars[i])
	}
	return b.String()
}

func (m *topModel) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "heapscope top " + m.src.name
	return v
}

func (m *topModel) render() string {
	w, h := m.width, m.height
	if w <= 0 {
		w = 100
	}
	if h <= 0 {
		h = 30
	}
	var lines []string
	add := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if r := []rune(s); len(r) > w {
			s = string(r[:w])
		}
		lines = append(lines, s)
	}
	state, _ := m.src.state()
	if m.paused {
		state += ", paused"
	}
	proc := "all processes"
	if m.pid != 0 {
		proc = fmt.Sprintf("pid %d", m.pid)
		if m.tid != 0 {
			proc += fmt.Sprintf(", thread %d", m.tid)
		} else {
			proc += ", all threads"
		}
	}
	add("heapscope top — session %q (%s) — %s — every %s", m.src.name, state, proc, m.interval)
	f := m.frame
	if f == nil {
		add("reading the trace…")
		return strings.Join(lines, "\n")
	}
	if f.Reading {
		add("%s", readingWord(f, m.readFrom))
		return strings.Join(lines, "\n")
	}
	add("live %s in %s blocks   allocs %.0f/s   frees %.0f/s   lost events %s",
		fmtSize(f.Live), fmtNum(f.Blocks), f.Allocs, f.Frees, lostWord(f))
	if note := sampledNote(f); note != "" {
		add("%s", note)
	}
	add("%s", sparkline(f.History, max(10, w-2)))
	add("")
	add("sorted by %s   keys: s sort  l g c t  p process  h thread  ↑↓ select  enter stack  space pause  q quit", m.order)
	add("%12s %s%12s %12s %12s  %s", "LIVE", lostHead(f), "GROWTH/s", "CALLS", "TEMPORARY", "SITE")
	rows := h - len(lines) - 1
	stackLines := 0
	if m.expanded && m.sel < len(f.Sites) {
		stackLines = min(len(f.Sites[m.sel].Stack)+1, rows/2)
	}
	rows -= stackLines
	// Keep the selected row on the screen.
	first := 0
	if m.sel >= rows {
		first = m.sel - rows + 1
	}
	for i := first; i < len(f.Sites) && i < first+rows; i++ {
		s := &f.Sites[i]
		mark := " "
		if i == m.sel {
			mark = ">"
		}
		add("%s%11s %s%12s %12s %12s  %s", mark, fmtSize(s.Live), lostCell(f, s), growthWord(s), fmtNum(s.Calls), tempWord(f, s), s.Name())
		if i == m.sel && stackLines > 0 {
			for j, fr := range s.Stack {
				if j == stackLines-1 {
					break
				}
				loc := fr.File
				if loc != "" && fr.Line > 0 {
					loc = fmt.Sprintf("%s:%d", fr.File, fr.Line)
				}
				add("%52s%s  %s", "", fr.Name(), loc)
			}
		}
	}
	return strings.Join(lines, "\n")
}
