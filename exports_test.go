package heapscope

import (
	"bufio"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/testutil/tracetest"
)

// launchRounds launches export_rounds ROUNDS with props and waits for its
// "ready"; next runs a round.
func launchRounds(t *testing.T, name string, props Properties, rounds string) (s *Session, next func(want string)) {
	t.Helper()
	bin := testutil.MustBuild(t, "export_rounds", testutil.Options{})
	cmd := exec.Command(bin, rounds)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s, err = Launch(name, props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		s.Stop()
	})
	r := bufio.NewReader(out)
	say := func(want string) {
		t.Helper()
		if want != "ready" {
			io.WriteString(in, "\n")
		}
		if line, _ := r.ReadString('\n'); strings.TrimSpace(line) != want {
			t.Fatalf("export_rounds said %q, want %q", line, want)
		}
	}
	say("ready")
	return s, func(want string) {
		if want == "" {
			in.Close() // exits
			return
		}
		say(want)
	}
}

// TestExportTotalsForTheSession: a session that exports keeps its totals
// from its start, whatever top's lease, and top shares them (a realtime
// session's totals otherwise begin at top's first query). A target that is
// never there slows nothing: its exports are retried, then dropped and
// counted when the session ends, within exportCloseWait.
func TestExportTotalsForTheSession(t *testing.T) {
	defer func(w, l time.Duration) { exportCloseWait, topLease = w, l }(exportCloseWait, topLease)
	exportCloseWait, topLease = time.Second, 30*time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there
	props := Properties{FileMode: RealTime, Export: []string{"otlp=http://" + addr}, ExportInterval: time.Second,
		FlushInterval: 50 * time.Millisecond}
	s, next := launchRounds(t, "export-totals", props, "2")
	next("round 1 done")
	time.Sleep(200 * time.Millisecond) // flushed
	for i := 0; i < 2; i++ {
		r, err := s.Top(TopQuery{Client: "t"})
		if err != nil {
			t.Fatal(err)
		}
		// 2 + 100 + 2 calls of the workload's own a round.
		if !r.Seeded || r.Totals.Allocs < uint64(i+1)*104 || r.Totals.LiveBytes < 2000*uint64(i+1) {
			t.Fatalf("query %d: seeded %v, %d calls, %d bytes live", i, r.Seeded, r.Totals.Allocs, r.Totals.LiveBytes)
		}
		// The lease expires: the totals stay.
		time.Sleep(100 * time.Millisecond)
		if i == 0 {
			next("round 2 done")
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(1500 * time.Millisecond) // an interval cut
	next("")
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	st := s.Status().Exports
	if len(st) != 1 || st[0].Target != "otlp=http://"+addr || st[0].Sent != 0 || st[0].Dropped < 2 || st[0].Queued != 0 ||
		st[0].Retried == 0 || !strings.Contains(st[0].LastError, "refused") {
		t.Errorf("exports %+v", st)
	}
}

// pyroscope is an HTTP server that takes what Pyroscope's /ingest takes and
// keeps each profile, read back with google/pprof's profile package.
type pyroscope struct {
	mu    sync.Mutex
	got   []*profile.Profile
	names []string
	err   error
}

func (p *pyroscope) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(err error) {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || r.URL.Path != "/ingest" || r.URL.Query().Get("format") != "pprof" {
		fail(err)
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail(err)
			return
		}
		if part.FormName() == "profile" {
			prof, err := profile.Parse(part)
			if err != nil {
				fail(err)
				return
			}
			p.mu.Lock()
			p.got = append(p.got, prof)
			p.names = append(p.names, r.URL.Query().Get("name"))
			p.mu.Unlock()
		}
	}
}

// TestExportPprof: --export pprof= sends each process's interval to a
// Pyroscope /ingest, one export per process: the profiles parse, and
// their allocations add up to the workload's per function.
func TestExportPprof(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	py := &pyroscope{}
	srv := &http.Server{Handler: py}
	go srv.Serve(l)
	defer srv.Close()
	props := Properties{FileMode: RealTime, Export: []string{"pprof=http://" + l.Addr().String()}, ExportInterval: time.Second}
	s, next := launchRounds(t, "export-pprof", props, "2")
	next("round 1 done")
	time.Sleep(1500 * time.Millisecond)
	next("round 2 done")
	next("")
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	st := s.Status().Exports
	py.mu.Lock()
	defer py.mu.Unlock()
	if py.err != nil || len(st) != 1 || st[0].Dropped != 0 || int(st[0].Sent) != len(py.got) || len(py.got) < 2 {
		t.Fatalf("%d profiles received (%v); exports %+v", len(py.got), py.err, st)
	}
	sums := map[string]int64{}
	var live int64
	for i, p := range py.got {
		if !strings.HasPrefix(py.names[i], "export_rounds") || !strings.Contains(py.names[i], "{pid=") {
			t.Errorf("application name %q", py.names[i])
		}
		var types []string
		for _, st := range p.SampleType {
			types = append(types, st.Type)
		}
		if strings.Join(types, ",") != "alloc_objects,alloc_space,inuse_objects,inuse_space" {
			t.Fatalf("sample types %v", types)
		}
		for _, smp := range p.Sample {
			if len(smp.Location) == 0 || len(smp.Location[0].Line) == 0 {
				continue
			}
			fn := smp.Location[0].Line[0].Function.Name
			sums[fn] += smp.Value[1]
			if fn == "leak_site" && i == len(py.got)-1 {
				live += smp.Value[3]
			}
		}
	}
	if sums["leak_site"] != 4000 || sums["churn_site"] != 12800 || sums["grow_site"] != 10200 || live != 4000 {
		t.Errorf("alloc_space by function %v, leak_site live at the end %d", sums, live)
	}
}

// TestExportLeakCheck: a session that exports keeps its totals from its
// start, and its leak checks use them: a check while it runs and the one
// at the program's exit are complete and find scan_planted's lost blocks,
// and the exports carry the program's heap to its end.
func TestExportLeakCheck(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	py := &pyroscope{}
	srv := &http.Server{Handler: py}
	go srv.Serve(l)
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "s.hst")
	s, end := launchPlanted(t, Properties{File: file, Export: []string{"pprof=http://" + l.Addr().String()}, ExportInterval: time.Second})
	const lost = 3032 + 3048 + 3064 + 3080 + 3096 + 3112 + 3128 + 3144 + 3272 + 3256 // scan_planted's lost blocks
	r, err := s.Leaks(LeaksQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Processes) != 1 || r.Processes[0].Error != "" || !r.Processes[0].Complete || r.Processes[0].Classes.Lost().Bytes != lost {
		t.Fatalf("check while exporting: %+v", r.Processes)
	}
	end()
	if v := testutil.NotesOf[event.Verdict](tracetest.Notes(t, file)); len(v) != 2 || !v[1].AtExit || !v[1].Complete {
		t.Errorf("verdicts %+v", v)
	}
	st := s.Status().Exports
	py.mu.Lock()
	defer py.mu.Unlock()
	if py.err != nil || len(st) != 1 || st[0].Dropped != 0 || int(st[0].Sent) != len(py.got) || len(py.got) == 0 {
		t.Fatalf("%d profiles received (%v); exports %+v", len(py.got), py.err, st)
	}
	var inuse int64
	for _, smp := range py.got[len(py.got)-1].Sample {
		inuse += smp.Value[3]
	}
	if inuse < lost {
		t.Errorf("the last export holds %d bytes live, less than the %d lost", inuse, lost)
	}
}
