package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// planted is a line "block LABEL ADDR SIZE CLASS" of scan_planted.
type planted struct {
	label string
	addr  uint64
	size  uint64
	class event.Class // Memcheck's, as the program planted it
}

var plantedLine = regexp.MustCompile(`^block (.+) 0x([0-9a-f]+) (\d+) (\w+)$`)

// readPlanted reads scan_planted's block lines up to "ready PID".
func readPlanted(t *testing.T, r *bufio.Reader) (blocks []planted, pid int) {
	t.Helper()
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading scan_planted: %v (%q)", err, l)
		}
		l = strings.TrimSpace(l)
		if p, ok := strings.CutPrefix(l, "ready "); ok {
			pid, _ = strconv.Atoi(p)
			return blocks, pid
		}
		if strings.HasPrefix(l, "waiting ") {
			continue
		}
		m := plantedLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("scan_planted said %q", l)
		}
		addr, _ := strconv.ParseUint(m[2], 16, 64)
		size, _ := strconv.ParseUint(m[3], 10, 64)
		c, err := event.ParseClass(m[4])
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, planted{m[1], addr, size, c})
	}
}

// lsanClass is what LeakSanitizer's rules make of a Memcheck class: an
// interior pointer reaches, and a lost cycle is all indirect.
func lsanClass(label string, c event.Class) event.Class {
	switch {
	case c == event.ClassPossible:
		return event.ClassReachable
	case strings.HasPrefix(label, "cycle "):
		return event.ClassIndirect
	}
	return c
}

// noteSink keeps a trace's verdicts and warnings.
type noteSink struct {
	event.Sink
	verdicts []event.Verdict
	warnings []event.Warning
}

func (s *noteSink) Note(n event.Note) error {
	switch n := n.(type) {
	case event.Verdict:
		s.verdicts = append(s.verdicts, n)
	case event.Warning:
		s.warnings = append(s.warnings, n)
	}
	return nil
}

// traceNotes returns the verdicts and warnings of a trace.
func traceNotes(t *testing.T, path string) *noteSink {
	t.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := &noteSink{Sink: event.Discard}
	if err := r.Replay(s, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// classesOf returns the classes a verdict of pid gave the planted blocks.
func classesOf(t *testing.T, ns *noteSink, pid int, blocks []planted) (map[string]event.Class, event.Verdict) {
	t.Helper()
	var v *event.Verdict
	for i := range ns.verdicts {
		if int(ns.verdicts[i].PID) == pid {
			v = &ns.verdicts[i]
		}
	}
	if v == nil {
		t.Fatalf("no verdict of pid %d in the trace (%d verdicts; warnings %+v)", pid, len(ns.verdicts), ns.warnings)
	}
	by := map[uint64]event.Class{}
	for _, b := range v.Blocks {
		by[b.Addr] = b.Class
	}
	got := map[string]event.Class{}
	for _, b := range blocks {
		c, ok := by[b.addr]
		if !ok {
			t.Errorf("pid %d: the verdict does not list %s (%#x)", pid, b.label, b.addr)
			c = event.Class(255)
		}
		got[b.label] = c
	}
	return got, *v
}

// runPlanted runs scan_planted (with args) under heapscope run with flags,
// lets it end, and returns its blocks, the pid that printed them and the
// trace.
func runPlanted(t *testing.T, flags []string, args ...string) ([]planted, int, string) {
	t.Helper()
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	trace := filepath.Join(t.TempDir(), "p.hst")
	cmd := cli(t, append(append(append([]string{"run", "-q", "-o", trace}, flags...), "--", bin), args...)...)
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := readPlanted(t, bufio.NewReader(out))
	io.WriteString(in, "go\n")
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("heapscope run: %v", err)
	}
	return blocks, pid, trace
}

// memcheckAtExit runs scan_planted under valgrind's Memcheck with a leak
// check at its exit (--leak-check=full --show-leak-kinds=all), and returns
// the class of each planted block (by its size: each has its own, and its
// own allocation stack, so each loss record holds one), and the blocks as
// the program printed them under valgrind.
func memcheckAtExit(t *testing.T, bin string, args ...string) (map[string]event.Class, []planted) {
	t.Helper()
	vg := testutil.Tool(t, "valgrind")
	cmd := exec.Command(vg, append([]string{"--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no", bin}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, out := testutil.StartPiped(t, cmd)
	blocks, _ := readPlanted(t, bufio.NewReader(out))
	io.WriteString(in, "go\n")
	io.Copy(io.Discard, out)
	cmd.Wait()
	// The exit's check is the last: what follows its HEAP SUMMARY.
	s := stderr.String()
	if i := strings.LastIndex(s, "HEAP SUMMARY"); i >= 0 {
		s = s[i:]
	}
	kinds := map[string]event.Class{"definitely lost": event.ClassDefinite, "indirectly lost": event.ClassIndirect,
		"possibly lost": event.ClassPossible, "still reachable": event.ClassReachable}
	rec := regexp.MustCompile(`([\d,]+) (?:\(([\d,]+) direct, [\d,]+ indirect\) )?bytes in 1 blocks are (definitely lost|indirectly lost|possibly lost|still reachable) in loss record`)
	bySize := map[uint64]event.Class{}
	for _, m := range rec.FindAllStringSubmatch(s, -1) {
		size := m[1]
		if m[2] != "" {
			size = m[2]
		}
		n, _ := strconv.ParseUint(strings.ReplaceAll(size, ",", ""), 10, 64)
		bySize[n] = kinds[m[3]]
	}
	got := map[string]event.Class{}
	for _, b := range blocks {
		c, ok := bySize[b.size]
		if !ok {
			t.Errorf("Memcheck at exit has no loss record of %d bytes (%s)", b.size, b.label)
		}
		got[b.label] = c
	}
	return got, blocks
}

// lsanLost builds scan_planted with -fsanitize=leak and runs it: it asks
// for LeakSanitizer's check at its ready point. It returns the class of
// each planted block LeakSanitizer reports (direct or indirect leak), and
// still reachable for the others.
func lsanLost(t *testing.T, args ...string) map[string]event.Class {
	t.Helper()
	bin, err := testutil.Build("scan_planted", testutil.Options{Flags: []string{"-fsanitize=leak"}})
	if err != nil {
		testutil.SkipWithout(t, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LSAN_OPTIONS=exitcode=23")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// The check ends the program when it finds leaks (exitcode): the
	// block lines come, and no "ready".
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var blocks []planted
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := plantedLine.FindStringSubmatch(sc.Text()); m != nil {
			size, _ := strconv.ParseUint(m[3], 10, 64)
			blocks = append(blocks, planted{label: m[1], size: size})
		}
	}
	cmd.Wait()
	if len(blocks) == 0 {
		t.Fatalf("the LeakSanitizer build printed no blocks; stderr:\n%s", stderr.String())
	}
	leak := regexp.MustCompile(`(Direct|Indirect) leak of (\d+) byte\(s\) in 1 object`)
	bySize := map[uint64]event.Class{}
	for _, m := range leak.FindAllStringSubmatch(stderr.String(), -1) {
		n, _ := strconv.ParseUint(m[2], 10, 64)
		bySize[n] = event.ClassDefinite
		if m[1] == "Indirect" {
			bySize[n] = event.ClassIndirect
		}
	}
	got := map[string]event.Class{}
	for _, b := range blocks {
		c, ok := bySize[b.size]
		if !ok {
			c = event.ClassReachable
		}
		got[b.label] = c
	}
	return got
}

// comparePlanted checks heapscope's classes of the planted blocks against
// the planted ones, Memcheck's (mc, from blocks planted under valgrind) and,
// when lsan is set, heapscope's under LeakSanitizer's rules (ls) against
// LeakSanitizer's.
func comparePlanted(t *testing.T, blocks []planted, got map[string]event.Class, vg map[string]event.Class, vgBlocks []planted) {
	t.Helper()
	for _, b := range blocks {
		if got[b.label] != b.class {
			t.Errorf("%s: heapscope %v, planted %v", b.label, got[b.label], b.class)
		}
	}
	native := map[string]event.Class{}
	for _, b := range blocks {
		native[b.label] = b.class
	}
	for _, b := range vgBlocks {
		// The same role (a cycle's block is definite by its address,
		// which differs under valgrind): the same class.
		if native[b.label] == b.class && got[b.label] != vg[b.label] {
			t.Errorf("%s: heapscope %v, Memcheck %v", b.label, got[b.label], vg[b.label])
		}
	}
}

func providers(t *testing.T) []string {
	out := []string{"preload"}
	if err := ebpf.Available(); err == nil {
		out = append(out, "ebpf")
	} else if os.Getenv("HEAPSCOPE_REQUIRE_TOOLS") == "1" {
		t.Errorf("eBPF unavailable: %v", err)
	} else {
		t.Logf("eBPF unavailable, preload only: %v", err)
	}
	return out
}

// TestRunLeakCheckPlanted: scan_planted traced by heapscope run, which
// checks it at its exit, under each provider: every planted block's class
// is Memcheck's (checked at the program's exit under valgrind), and with
// --leak-rules lsan the lost set is LeakSanitizer's.
func TestRunLeakCheckPlanted(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	vg, vgBlocks := memcheckAtExit(t, bin)
	lsan := lsanLost(t)
	for _, prov := range providers(t) {
		t.Run(prov, func(t *testing.T) {
			blocks, pid, trace := runPlanted(t, []string{"--provider", prov})
			got, v := classesOf(t, traceNotes(t, trace), pid, blocks)
			if !v.AtExit || !v.Complete || v.Partial || v.Pause <= 0 {
				t.Errorf("verdict at exit %v, complete %v, partial %v, pause %v", v.AtExit, v.Complete, v.Partial, time.Duration(v.Pause))
			}
			comparePlanted(t, blocks, got, vg, vgBlocks)

			blocks, pid, trace = runPlanted(t, []string{"--provider", prov, "--leak-rules", "lsan"})
			ls, v := classesOf(t, traceNotes(t, trace), pid, blocks)
			if v.Rules != event.RulesLSan {
				t.Errorf("rules %v", v.Rules)
			}
			for _, b := range blocks {
				if want := lsanClass(b.label, b.class); ls[b.label] != want {
					t.Errorf("%s: heapscope (LeakSanitizer's rules) %v, want %v", b.label, ls[b.label], want)
				}
				if ls[b.label] != lsan[b.label] {
					t.Errorf("%s: heapscope (LeakSanitizer's rules) %v, LeakSanitizer %v", b.label, ls[b.label], lsan[b.label])
				}
			}
			for _, b := range blocks {
				t.Logf("%-16s heapscope %-10v Memcheck %-10v | heapscope-LSan %-10v LSan %v", b.label, got[b.label], vg[b.label], ls[b.label], lsan[b.label])
			}
		})
	}
}

// TestRunNoLeakCheck: --no-leak-check leaves no verdict, and the program is
// not traced with ptrace.
func TestRunNoLeakCheck(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	trace := filepath.Join(t.TempDir(), "p.hst")
	cmd := cli(t, "run", "-q", "--no-leak-check", "-o", trace, "--", bin)
	in, out := testutil.StartPiped(t, cmd)
	_, pid := readPlanted(t, bufio.NewReader(out))
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "TracerPid:\t0\n") {
		t.Errorf("the program is traced without a leak check:\n%s", b)
	}
	io.WriteString(in, "go\n")
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if ns := traceNotes(t, trace); len(ns.verdicts) != 0 {
		t.Errorf("%d verdicts with --no-leak-check", len(ns.verdicts))
	}
}

// waitTracing waits until session name traces pid (an attach answers
// queries before its probes are in).
func waitTracing(t *testing.T, name string, pid int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err := cli(t, "query", "--json", name).Output()
		var st heapscope.Status
		if err == nil && json.Unmarshal(out, &st) == nil {
			for _, p := range append(st.PIDs, st.Processes...) {
				if p == pid {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %q never traced pid %d", name, pid)
		}
	}
}

// leaksJSON runs heapscope leaks --json with args.
func leaksJSON(t *testing.T, args ...string) heapscope.LeaksResult {
	t.Helper()
	cmd := cli(t, append([]string{"leaks", "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("heapscope leaks %v: %v\n%s", args, err, stderr.String())
	}
	var r heapscope.LeaksResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return r
}

// TestLeaksRunning: heapscope leaks checks scan_planted while it runs:
// traced by heapscope run from its start (each provider), every block's
// class is the planted one, as Memcheck's and LeakSanitizer's checks at the
// same point give it (scan/roots' TestPlanted compares those); traced by an
// attach before it plants (late), the same. In the forked child (fork), the
// blocks it inherited are not known: its own get their classes.
func TestLeaksRunning(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	for _, prov := range providers(t) {
		for _, mode := range []string{"", "fork"} {
			t.Run(prov+"/"+mode, func(t *testing.T) {
				name := fmt.Sprintf("leaks-%s-%s-%d", prov, mode, os.Getpid())
				trace := filepath.Join(t.TempDir(), "p.hst")
				args := []string{"run", "-q", "--no-leak-check", "--provider", prov, "--name", name, "-o", trace, "--", bin}
				if mode != "" {
					args = append(args, mode)
				}
				cmd := cli(t, args...)
				cmd.Stderr = os.Stderr
				in, out := testutil.StartPiped(t, cmd)
				blocks, pid := readPlanted(t, bufio.NewReader(out))
				waitTracing(t, name, pid)
				for _, rules := range []string{"memcheck", "lsan"} {
					r := leaksJSON(t, "-p", strconv.Itoa(pid), "--rules", rules)
					if len(r.Processes) != 1 || r.Processes[0].Error != "" {
						t.Fatalf("leaks: %+v", r)
					}
					p := r.Processes[0]
					if p.Paused <= 0 || p.Paused > p.Elapsed {
						t.Errorf("paused %v of %v", time.Duration(p.Paused), time.Duration(p.Elapsed))
					}
					if (mode == "fork") != p.Partial {
						t.Errorf("%s: partial %v: %v", mode, p.Partial, p.Notes)
					}
				}
				io.WriteString(in, "go\n")
				io.Copy(io.Discard, out)
				if err := cmd.Wait(); err != nil {
					t.Fatal(err)
				}
				ns := traceNotes(t, trace)
				var mc, ls map[string]event.Class
				for _, v := range ns.verdicts {
					if int(v.PID) != pid {
						continue
					}
					got, _ := classesOf(t, &noteSink{verdicts: []event.Verdict{v}}, pid, knownBlocks(blocks, mode))
					if v.Rules == event.RulesLSan {
						ls = got
					} else {
						mc = got
					}
				}
				for _, b := range knownBlocks(blocks, mode) {
					if mc[b.label] != b.class {
						t.Errorf("%s: heapscope %v, planted %v", b.label, mc[b.label], b.class)
					}
					if want := lsanClass(b.label, b.class); ls[b.label] != want {
						t.Errorf("%s: heapscope (LeakSanitizer's rules) %v, want %v", b.label, ls[b.label], want)
					}
				}
			})
		}
	}
}

// knownBlocks are the planted blocks a session tracing the process knows:
// in a forked child, not those it inherited.
func knownBlocks(blocks []planted, mode string) []planted {
	if mode != "fork" {
		return blocks
	}
	var out []planted
	for _, b := range blocks {
		if strings.HasPrefix(b.label, "fork child") {
			out = append(out, b)
		}
	}
	return out
}

// TestLeaksAttached: an attach before scan_planted plants its blocks
// (late), with its census of the heap at the attach (the default) and
// without: heapscope leaks classifies every block as Memcheck does; with
// the census the check knows every block, without it is partial (the
// blocks from before the attach are not known), and still right.
func TestLeaksAttached(t *testing.T) {
	if err := ebpf.Available(); err != nil {
		testutil.SkipWithoutEBPF(t, err)
	}
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	for _, census := range []bool{true, false} {
		t.Run(fmt.Sprintf("census=%v", census), func(t *testing.T) {
			prog := exec.Command(bin, "late")
			in, out := testutil.StartPiped(t, prog)
			br := bufio.NewReader(out)
			l, _ := br.ReadString('\n')
			var pid int
			if _, err := fmt.Sscanf(l, "waiting %d", &pid); err != nil {
				t.Fatalf("scan_planted said %q", l)
			}
			name := fmt.Sprintf("leaks-attach-%v-%d", census, os.Getpid())
			trace := filepath.Join(t.TempDir(), "a.hst")
			args := []string{"attach", "-q", "-p", strconv.Itoa(pid), "--name", name, "-o", trace}
			if !census {
				args = append(args, "--no-census")
			}
			att := cli(t, args...)
			errOut, err := att.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := att.Start(); err != nil {
				t.Fatal(err)
			}
			defer att.Process.Kill()
			// Its census done, attach says it traces the process.
			eb := bufio.NewReader(errOut)
			for {
				l, err := eb.ReadString('\n')
				if err != nil {
					t.Fatalf("attach: %v", err)
				}
				t.Logf("attach: %s", strings.TrimSpace(l))
				if strings.Contains(l, "tracing pid") {
					break
				}
			}
			go io.Copy(io.Discard, eb)
			io.WriteString(in, "plant\n")
			blocks, _ := readPlanted(t, br)
			cli(t, "flush", name).Run()
			r := leaksJSON(t, name)
			if len(r.Processes) != 1 || r.Processes[0].Error != "" || r.Processes[0].Partial == census {
				t.Fatalf("leaks: %+v", r)
			}
			if err := cli(t, "stop", name).Run(); err != nil {
				t.Fatal(err)
			}
			att.Wait()
			io.WriteString(in, "go\n")
			prog.Wait()
			got, v := classesOf(t, traceNotes(t, trace), pid, blocks)
			if v.Partial == census {
				t.Errorf("the verdict's partial is %v with census %v", v.Partial, census)
			}
			for _, b := range blocks {
				if got[b.label] != b.class {
					t.Errorf("%s: heapscope %v, planted %v", b.label, got[b.label], b.class)
				}
			}
		})
	}
}

// threadsTarget is a running scan_threads (8 threads allocating in a loop).
type threadsTarget struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Reader
	pid int
}

func (tg *threadsTarget) line() string {
	tg.t.Helper()
	l, err := tg.out.ReadString('\n')
	if err != nil {
		tg.t.Fatalf("reading scan_threads: %v (%q)", err, l)
	}
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "CORRUPT") || strings.HasPrefix(l, "EINTR") {
		tg.t.Fatalf("scan_threads: %s", l)
	}
	return l
}

// counts returns the threads' iteration counts.
func (tg *threadsTarget) counts() []int64 {
	tg.t.Helper()
	io.WriteString(tg.in, "p\n")
	f := strings.Fields(tg.line())
	if len(f) != 9 || f[0] != "counts" {
		tg.t.Fatalf("bad counts line %q", f)
	}
	var c []int64
	for _, s := range f[1:] {
		n, _ := strconv.ParseInt(s, 10, 64)
		c = append(c, n)
	}
	return c
}

// progressing waits until every thread counted past before.
func (tg *threadsTarget) progressing(before []int64) []int64 {
	tg.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c := tg.counts()
		all := true
		for i := range c {
			all = all && c[i] > before[i]
		}
		if all {
			return c
		}
		if time.Now().After(deadline) {
			tg.t.Fatalf("the threads did not run on: counts %v, before %v", c, before)
		}
	}
}

// threadStates returns the state letter and tracer of each thread of pid.
func threadStates(t *testing.T, pid int) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		st := string(b[i+2 : i+3])
		tracer := ""
		if s, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status"); err == nil {
			for _, l := range strings.Split(string(s), "\n") {
				if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
					tracer = strings.TrimSpace(v)
				}
			}
		}
		out[task.Name()] = [2]string{st, tracer}
	}
	return out
}

// checkNotStopped fails when a thread of pid is stopped, or traced when
// traced is false.
func checkNotStopped(t *testing.T, pid int, traced bool, when string) {
	t.Helper()
	for tid, s := range threadStates(t, pid) {
		if s[0] == "t" || s[0] == "T" || !traced && s[1] != "0" {
			t.Errorf("%s: thread %s in state %s, traced by %s", when, tid, s[0], s[1])
		}
	}
}

func startThreads(t *testing.T, cmd *exec.Cmd) *threadsTarget {
	t.Helper()
	// Pipes of our own: the program outlives a heapscope run that is
	// killed, whose Wait would close StdoutPipe's.
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	tg := &threadsTarget{t: t, in: inW, out: bufio.NewReader(outR)}
	l := tg.line()
	if _, err := fmt.Sscanf(l, "ready %d", &tg.pid); err != nil {
		t.Fatalf("scan_threads said %q", l)
	}
	return tg
}

// TestLeaksRepeated: a running process of 8 threads allocating, traced from
// its start (run, its exit watched) or attached, checked 20 times in a row:
// each check answers, no thread stays stopped (nor traced, when attached),
// and the program runs on, its output unchanged (its blocks read back).
func TestLeaksRepeated(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_threads", testutil.Options{})
	for _, how := range []string{"run", "attach"} {
		t.Run(how, func(t *testing.T) {
			name := fmt.Sprintf("leaks-rep-%s-%d", how, os.Getpid())
			var tg *threadsTarget
			var session *exec.Cmd
			if how == "run" {
				session = cli(t, "run", "-q", "--name", name, "-o", filepath.Join(t.TempDir(), "t.hst"), "--", bin, "8")
				tg = startThreads(t, session)
			} else {
				if err := ebpf.Available(); err != nil {
					testutil.SkipWithoutEBPF(t, err)
				}
				prog := exec.Command(bin, "8")
				tg = startThreads(t, prog)
				defer func() { io.WriteString(tg.in, "q\n"); prog.Wait() }()
				session = cli(t, "attach", "-q", "-p", strconv.Itoa(tg.pid), "--name", name, "-o", filepath.Join(t.TempDir(), "t.hst"))
				session.Stderr = os.Stderr
				if err := session.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { session.Process.Kill(); session.Wait() }()
			}
			waitTracing(t, name, tg.pid)
			counts := tg.counts()
			var paused []time.Duration
			for i := 0; i < 20; i++ {
				r := leaksJSON(t, name)
				if len(r.Processes) != 1 || r.Processes[0].Error != "" || r.Processes[0].Blocks == 0 && how == "run" {
					t.Fatalf("check %d: %+v", i, r)
				}
				paused = append(paused, time.Duration(r.Processes[0].Paused))
				checkNotStopped(t, tg.pid, how == "run", fmt.Sprintf("after check %d", i))
				counts = tg.progressing(counts)
			}
			t.Logf("%s: paused %v", how, paused)
			if how == "run" {
				io.WriteString(tg.in, "q\n")
				if l := tg.line(); l != "done" {
					t.Errorf("scan_threads ended with %q", l)
				}
				if err := session.Wait(); err != nil {
					t.Errorf("heapscope run: %v", err)
				}
			}
		})
	}
}

// TestLeaksKilled: heapscope killed in the middle of a check (its target
// stopped) leaves no thread of the target stopped or traced, and the target
// runs on: for a session that attached, and for one that launched it.
func TestLeaksKilled(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_threads", testutil.Options{})
	for _, how := range []string{"attach", "run"} {
		t.Run(how, func(t *testing.T) {
			for round := 0; round < 3; round++ {
				name := fmt.Sprintf("leaks-kill-%s-%d-%d", how, os.Getpid(), round)
				var tg *threadsTarget
				var session, prog *exec.Cmd
				if how == "run" {
					session = cli(t, "run", "-q", "--no-leak-check", "--name", name, "-o", filepath.Join(t.TempDir(), "t.hst"), "--", bin, "8")
					tg = startThreads(t, session)
				} else {
					if err := ebpf.Available(); err != nil {
						testutil.SkipWithoutEBPF(t, err)
					}
					prog = exec.Command(bin, "8")
					tg = startThreads(t, prog)
					session = cli(t, "attach", "-q", "-p", strconv.Itoa(tg.pid), "--name", name, "-o", filepath.Join(t.TempDir(), "t.hst"))
					if err := session.Start(); err != nil {
						t.Fatal(err)
					}
				}
				waitTracing(t, name, tg.pid)
				before := tg.counts()
				check := cli(t, "leaks", name)
				check.Stdout, check.Stderr = io.Discard, io.Discard
				if err := check.Start(); err != nil {
					t.Fatal(err)
				}
				// Kill the session as soon as a thread of the target is
				// stopped by the check.
				stoppedSeen := false
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !stoppedSeen; {
					for _, s := range threadStates(t, tg.pid) {
						stoppedSeen = stoppedSeen || s[0] == "t"
					}
				}
				session.Process.Kill()
				session.Wait()
				check.Wait()
				if !stoppedSeen {
					t.Fatalf("round %d: never saw the check stop the target", round)
				}
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					st := threadStates(t, tg.pid)
					ok := true
					for _, s := range st {
						ok = ok && s[0] != "t" && s[0] != "T" && s[1] == "0"
					}
					if ok || time.Now().After(deadline) {
						break
					}
				}
				checkNotStopped(t, tg.pid, false, fmt.Sprintf("round %d, heapscope killed", round))
				tg.progressing(before)
				io.WriteString(tg.in, "q\n")
				if prog != nil {
					prog.Wait()
				}
			}
		})
	}
}
