package ebpf

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/proc"
)

// The watchdog. The BPF side stops processes (a followed child at its
// fork, a followed process at its exec, a process whose loader added
// objects) until the tracer continues them; were the tracer killed between
// the two, they would stay stopped for ever. So each tracer that can hold
// starts a watchdog: this same program, run again with watchdogEnv set,
// which inherits the BPF map of held processes (every stop is recorded
// there before it is made) and the read end of a pipe only the tracer
// writes to. When the pipe ends (the tracer closed it, or died) the
// watchdog continues every process the map still lists that is stopped,
// a few times over a second (a stop may come while the tracer's probes are
// being freed), and exits.

// watchdogEnv, set to "1", makes a program that links this package a
// watchdog (see init).
const watchdogEnv = "HEAPSCOPE_EBPF_WATCHDOG"

// watchdogScans are when the watchdog looks for held processes, after the
// pipe ends.
var watchdogScans = []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, time.Second}

func init() {
	if os.Getenv(watchdogEnv) == "1" {
		os.Exit(watchdogMain())
	}
}

// watchdogMain is the watchdog process: fd 3 is the held map, fd 4 the
// pipe.
func watchdogMain() int {
	// Not ended by the signals meant for the tracer (a hang-up, a kill of
	// its process group): it is what continues the processes when those
	// end the tracer.
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGTSTP, unix.SIGPIPE)
	held, err := ebpf.NewMapFromFD(3)
	if err != nil {
		return 1
	}
	pipe := os.NewFile(4, "watchdog")
	var b [1]byte
	for {
		if _, err := pipe.Read(b[:]); err != nil {
			break // the tracer closed it, or died
		}
	}
	last := time.Duration(0)
	for _, at := range watchdogScans {
		time.Sleep(at - last)
		last = at
		continueHeld(held)
	}
	return 0
}

// continueHeld continues the processes in held that are stopped, and
// empties it.
func continueHeld(held *ebpf.Map) {
	var pid uint32
	var pids []uint32
	it := held.Iterate()
	var v uint8
	for it.Next(&pid, &v) {
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		if st, err := proc.ReadStat(int(pid)); err == nil && st.State == 'T' {
			unix.Kill(int(pid), unix.SIGCONT)
		}
		held.Delete(pid)
	}
}

// watchdog is the tracer's side: the pipe's write end, closed at Close.
type watchdog struct {
	w   *os.File
	cmd *exec.Cmd
}

// startWatchdog starts the watchdog of held. Once it returns, the
// watchdog holds the map and the pipe: a stop recorded from then on is
// undone whatever happens to this process.
func startWatchdog(held *ebpf.Map) (*watchdog, error) {
	fd, err := unix.FcntlInt(uintptr(held.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ebpf: watchdog: %w", err)
	}
	mapFile := os.NewFile(uintptr(fd), "held")
	defer mapFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("ebpf: watchdog: %w", err)
	}
	defer r.Close()
	// This program, even if its file has been replaced or removed since.
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{watchdogEnv + "=1"}
	cmd.ExtraFiles = []*os.File{mapFile, r}
	// Its own process group: a Ctrl-C meant for the tracer does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("ebpf: watchdog: %w", err)
	}
	go cmd.Wait() // reaped when it ends
	return &watchdog{w: w, cmd: cmd}, nil
}

// close ends the watchdog's wait: it continues what the map still holds
// (nothing, after Close's resumeAll) and exits.
func (d *watchdog) close() {
	if d != nil {
		d.w.Close()
	}
}
