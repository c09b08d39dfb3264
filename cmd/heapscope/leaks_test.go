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
	"github.com/heapscope/heapscope/internal/testutil/tracetest"
)

// classesOf returns the classes a verdict of pid gave the planted blocks.
func classesOf(t *testing.T, ns *testutil.NoteSink, pid int, blocks []testutil.Planted) (map[string]event.Class, event.Verdict) {
	t.Helper()
	var v *event.Verdict
	verdicts := testutil.NotesOf[event.Verdict](ns)
	for i := range verdicts {
		if int(verdicts[i].PID) == pid {
			v = &verdicts[i]
		}
	}
	if v == nil {
		t.Fatalf("no verdict of pid %d in the trace (%d verdicts; warnings %+v)", pid, len(verdicts), testutil.NotesOf[event.Warning](ns))
	}
	by := map[uint64]event.Class{}
	for _, b := range v.Blocks {
		by[b.Addr] = b.Class
	}
	got := map[string]event.Class{}
	for _, b := range blocks {
		c, ok := by[b.Addr]
		if !ok {
			t.Errorf("pid %d: the verdict does not list %s (%#x)", pid, b.Label, b.Addr)
			c = event.Class(255)
		}
		got[b.Label] = c
	}
	return got, *v
}

// runPlanted runs scan_planted (with args) under heapscope run with flags,
// lets it end, and returns its blocks, the pid that printed them and the
// trace.
func runPlanted(t *testing.T, flags []string, args ...string) ([]testutil.Planted, int, string) {
	t.Helper()
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	trace := filepath.Join(t.TempDir(), "p.hst")
	cmd := cli(t, append(append(append([]string{"run", "-q", "-o", trace}, flags...), "--", bin), args...)...)
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := testutil.ReadPlanted(t, bufio.NewReader(out))
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
func memcheckAtExit(t *testing.T, bin string, args ...string) (map[string]event.Class, []testutil.Planted) {
	t.Helper()
	vg := testutil.Tool(t, "valgrind")
	cmd := exec.Command(vg, append([]string{"--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no", bin}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, out := testutil.StartPiped(t, cmd)
	blocks, _ := testutil.ReadPlanted(t, bufio.NewReader(out))
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
	return testutil.MemcheckRecords(t, "Memcheck at exit", blocks, bySize), blocks
}

// comparePlanted checks heapscope's classes of the planted blocks against
// the planted ones, Memcheck's (mc, from blocks planted under valgrind) and,
// when lsan is set, heapscope's under LeakSanitizer's rules (ls) against
// LeakSanitizer's.
func comparePlanted(t *testing.T, blocks []testutil.Planted, got map[string]event.Class, vg map[string]event.Class, vgBlocks []testutil.Planted) {
	t.Helper()
	for _, b := range blocks {
		if got[b.Label] != b.Class {
			t.Errorf("%s: heapscope %v, planted %v", b.Label, got[b.Label], b.Class)
		}
	}
	testutil.SameRoleAsMemcheck(t, blocks, got, vgBlocks, vg)
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
	lsan := testutil.LSanPlanted(t)
	for _, prov := range providers(t) {
		t.Run(prov, func(t *testing.T) {
			blocks, pid, trace := runPlanted(t, []string{"--provider", prov})
			got, v := classesOf(t, tracetest.Notes(t, trace), pid, blocks)
			if !v.AtExit || !v.Complete || v.Partial || v.Pause <= 0 {
				t.Errorf("verdict at exit %v, complete %v, partial %v, pause %v", v.AtExit, v.Complete, v.Partial, time.Duration(v.Pause))
			}
			comparePlanted(t, blocks, got, vg, vgBlocks)

			blocks, pid, trace = runPlanted(t, []string{"--provider", prov, "--leak-rules", "lsan"})
			ls, v := classesOf(t, tracetest.Notes(t, trace), pid, blocks)
			if v.Rules != event.RulesLSan {
				t.Errorf("rules %v", v.Rules)
			}
			for _, b := range blocks {
				if want := testutil.PlantedLSanClass(b.Label, b.Class); ls[b.Label] != want {
					t.Errorf("%s: heapscope (LeakSanitizer's rules) %v, want %v", b.Label, ls[b.Label], want)
				}
				if ls[b.Label] != lsan[b.Label] {
					t.Errorf("%s: heapscope (LeakSanitizer's rules) %v, LeakSanitizer %v", b.Label, ls[b.Label], lsan[b.Label])
				}
			}
			for _, b := range blocks {
				t.Logf("%-16s heapscope %-10v Memcheck %-10v | heapscope-LSan %-10v LSan %v", b.Label, got[b.Label], vg[b.Label], ls[b.Label], lsan[b.Label])
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
	_, pid := testutil.ReadPlanted(t, bufio.NewReader(out))
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
	if ns := tracetest.Notes(t, trace); len(testutil.NotesOf[event.Verdict](ns)) != 0 {
		t.Errorf("%d verdicts with --no-leak-check", len(testutil.NotesOf[event.Verdict](ns)))
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
				blocks, pid := testutil.ReadPlanted(t, bufio.NewReader(out))
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
				ns := tracetest.Notes(t, trace)
				var mc, ls map[string]event.Class
				for _, v := range testutil.NotesOf[event.Verdict](ns) {
					if int(v.PID) != pid {
						continue
					}
					got, _ := classesOf(t, &testutil.NoteSink{Notes: []event.Note{v}}, pid, knownBlocks(blocks, mode))
					if v.Rules == event.RulesLSan {
						ls = got
					} else {
						mc = got
					}
				}
				for _, b := range knownBlocks(blocks, mode) {
					if mc[b.Label] != b.Class {
						t.Errorf("%s: heapscope %v, planted %v", b.Label, mc[b.Label], b.Class)
					}
					if want := testutil.PlantedLSanClass(b.Label, b.Class); ls[b.Label] != want {
						t.Errorf("%s: heapscope (LeakSanitizer's rules) %v, want %v", b.Label, ls[b.Label], want)
					}
				}
			})
		}
	}
}

// knownBlocks are the planted blocks a session tracing the process knows:
// in a forked child, not those it inherited.
func knownBlocks(blocks []testutil.Planted, mode string) []testutil.Planted {
	if mode != "fork" {
		return blocks
	}
	var out []testutil.Planted
	for _, b := range blocks {
		if strings.HasPrefix(b.Label, "fork child") {
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
			testutil.ReadUntil(t, eb, "attach", func(l string) bool {
				t.Logf("attach: %s", strings.TrimSpace(l))
				return strings.Contains(l, "tracing pid")
			})
			go io.Copy(io.Discard, eb)
			io.WriteString(in, "plant\n")
			blocks, _ := testutil.ReadPlanted(t, br)
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
			got, v := classesOf(t, tracetest.Notes(t, trace), pid, blocks)
			if v.Partial == census {
				t.Errorf("the verdict's partial is %v with census %v", v.Partial, census)
			}
			for _, b := range blocks {
				if got[b.Label] != b.Class {
					t.Errorf("%s: heapscope %v, planted %v", b.Label, got[b.Label], b.Class)
				}
			}
		})
	}
}

// threadsTarget is a running scan_threads (8 threads allocating in a loop).
type threadsTarget struct {
	testutil.ThreadsProgram
	pid int
}

// checkNotStopped fails when a thread of pid is stopped, or traced when
// traced is false.
// checkNotStopped fails t if a thread of pid is stopped, or traced by
// another process than tracer (0: by none).
func checkNotStopped(t *testing.T, pid, tracer int, when string) {
	t.Helper()
	for _, s := range testutil.Threads(t, pid) {
		if s.Stopped() || s.Tracer != 0 && !threadOf(tracer, s.Tracer) {
			t.Errorf("%s: thread %d in state %c, traced by %d", when, s.TID, s.State, s.Tracer)
		}
	}
}

// threadOf reports whether thread tid is one of process pid's.
func threadOf(pid, tid int) bool {
	if pid == 0 {
		return false
	}
	_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid))
	return err == nil
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
	tg := &threadsTarget{ThreadsProgram: testutil.ThreadsProgram{TB: t, In: inW, Out: bufio.NewReader(outR), NThreads: 8}}
	l := tg.Line()
	if _, err := fmt.Sscanf(l, "ready %d", &tg.pid); err != nil {
		t.Fatalf("scan_threads said %q", l)
	}
	return tg
}

// TestLeaksRepeated: a running process of 8 threads allocating, traced from
// its start (run, its exit watched) or attached, checked 20 times in a row:
// each check answers, no thread stays stopped (nor traced by another than
// the session), and the program runs on, its output unchanged (its blocks read back).
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
				defer func() { io.WriteString(tg.In, "q\n"); prog.Wait() }()
				session = cli(t, "attach", "-q", "-p", strconv.Itoa(tg.pid), "--name", name, "-o", filepath.Join(t.TempDir(), "t.hst"))
				session.Stderr = os.Stderr
				if err := session.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { session.Process.Kill(); session.Wait() }()
			}
			waitTracing(t, name, tg.pid)
			counts := tg.Counts()
			var paused []time.Duration
			for i := 0; i < 20; i++ {
				r := leaksJSON(t, name)
				if len(r.Processes) != 1 || r.Processes[0].Error != "" || r.Processes[0].Blocks == 0 && how == "run" {
					t.Fatalf("check %d: %+v", i, r)
				}
				paused = append(paused, time.Duration(r.Processes[0].Paused))
				// Traced by the session alone: run's watch of the exit,
				// attach's of the children it follows.
				checkNotStopped(t, tg.pid, session.Process.Pid, fmt.Sprintf("after check %d", i))
				counts = tg.Progressing(counts)
			}
			t.Logf("%s: paused %v", how, paused)
			if how == "run" {
				io.WriteString(tg.In, "q\n")
				if l := tg.Line(); l != "done" {
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
				before := tg.Counts()
				// Kill the session as soon as a thread of the target is
				// stopped by a check. A check's stop lasts milliseconds,
				// which a loaded machine may not let this loop see: a
				// check that ended unseen is followed by another.
				stoppedSeen := false
				said := &testutil.SyncBuffer{}
				for checks, deadline := 0, time.Now().Add(30*time.Second); !stoppedSeen && checks < 10 && time.Now().Before(deadline); checks++ {
					said = &testutil.SyncBuffer{}
					check := cli(t, "leaks", name)
					check.Stdout, check.Stderr = io.Discard, said
					if err := check.Start(); err != nil {
						t.Fatal(err)
					}
					ended := make(chan struct{})
					go func() { check.Wait(); close(ended) }()
				poll:
					for !stoppedSeen && time.Now().Before(deadline) {
						for _, s := range testutil.Threads(t, tg.pid) {
							stoppedSeen = stoppedSeen || s.State == 't'
						}
						select {
						case <-ended:
							break poll
						default:
						}
					}
					if stoppedSeen {
						session.Process.Kill()
					}
					<-ended
				}
				session.Process.Kill()
				session.Wait()
				if !stoppedSeen {
					t.Fatalf("round %d: never saw a check stop the target (the last check said %q)", round, said.String())
				}
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					ok := true
					for _, s := range testutil.Threads(t, tg.pid) {
						ok = ok && !s.Stopped() && s.Tracer == 0
					}
					if ok || time.Now().After(deadline) {
						break
					}
				}
				checkNotStopped(t, tg.pid, 0, fmt.Sprintf("round %d, heapscope killed", round))
				tg.Progressing(before)
				io.WriteString(tg.In, "q\n")
				if prog != nil {
					prog.Wait()
				}
			}
		})
	}
}
