//go:build linux && amd64

package preload

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// What internal/inject needs of the interposer to load it into a running
// process (heapscope attach --inject): the library, its entry points and
// the layout of their arguments (csrc/protocol.h's HS_INJ_*, csrc/inject.inc).

// Injectable describes the embedded interposer for an injector.
type Injectable struct {
	Image   []byte // the library's file
	BuildID []byte // its GNU build-id
	// BuildIDAt is the file address of the build-id's bytes: a loaded
	// copy is this build when they are there.
	BuildIDAt uint64
	// The entry points and the state, as file addresses (add the load
	// bias): Open() int, Start(args) int, Stop(args) int, and the
	// InjectState* words.
	Open, Start, Stop, State uint64
}

var (
	injOnce sync.Once
	inj     *Injectable
	injErr  error
)

// InjectLibrary returns the embedded interposer's Injectable.
func InjectLibrary() (*Injectable, error) {
	injOnce.Do(func() { inj, injErr = readInjectable(library) })
	return inj, injErr
}

func readInjectable(img []byte) (*Injectable, error) {
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("preload: the embedded interposer: %w", err)
	}
	defer f.Close()
	in := &Injectable{Image: img}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("preload: the embedded interposer's symbols: %w", err)
	}
	for _, s := range syms {
		switch s.Name {
		case injectOpen:
			in.Open = s.Value
		case injectStart:
			in.Start = s.Value
		case injectStop:
			in.Stop = s.Value
		case injectState:
			in.State = s.Value
		}
	}
	if in.Open == 0 || in.Start == 0 || in.Stop == 0 || in.State == 0 {
		return nil, errors.New("preload: the embedded interposer has no inject entry points")
	}
	if s := f.Section(".note.gnu.build-id"); s != nil {
		b, err := s.Data()
		// namesz, descsz, type, "GNU\0", the id
		if err == nil && len(b) >= 16 && binary.LittleEndian.Uint32(b[4:]) <= uint32(len(b)-16) {
			n := binary.LittleEndian.Uint32(b[4:])
			in.BuildID = b[16 : 16+n]
			in.BuildIDAt = s.Addr + 16
		}
	}
	if len(in.BuildID) == 0 {
		return nil, errors.New("preload: the embedded interposer has no build-id")
	}
	return in, nil
}

// The layout of the inject entry points' arguments, and of the state.
const (
	InjectArgsSize   = injArgsSize
	InjectArgMagic   = injArgMagic
	InjectArgVersion = injArgVersion
	InjectArgPeer    = injArgPeer
	InjectArgFlags   = injArgFlags
	// InjectStopRestore and InjectStopRelease are Stop's two steps.
	InjectStopRestore = injStopRestore
	InjectStopRelease = injStopRelease
	InjectArgEntries  = injArgEntries
	InjectArgModules  = injArgModules
	InjectArgErrno    = injArgErrno
	InjectStateSize   = injStateSize
	InjectStateMagic  = injStateMagic
	InjectStateActive = injStateActive
	// InjectStateWatcher is the watcher thread's ID, 0 when none runs.
	InjectStateWatcher  = injStateWatcher
	InjectStateEntries  = injStateEntries
	InjectStateSessions = injStateSessions
	// InjectMagic and InjectVersion are the arguments' and the state's
	// first two words.
	InjectMagic   = magic
	InjectVersion = version
)

// InjectError is the error of an entry point that returned code (one of
// csrc/protocol.h's -HS_INJ_*; 0 is no error), errno the errno it gave.
func InjectError(code int64, errno int32) error {
	var why string
	wrap := errs.ErrUnavailable
	switch -code {
	case 0:
		return nil
	case injBusy:
		why, wrap = "another heapscope session traces it (stop that one first)", errs.ErrAlreadyExists
	case injPreloaded:
		why = "it was started by heapscope run, whose interposer it preloads"
	case injSocket:
		why = "the interposer could not make its socket: " + unix.Errno(errno).Error()
	case injArgs:
		why = "the interposer loaded there is another version's"
	case injHandshake:
		why = "the interposer did not hear from the collector"
	case injThread:
		why = "the interposer could not start its thread: " + unix.Errno(errno).Error()
	case injNotOpen:
		why = "the interposer's connection was not opened"
	default:
		why = fmt.Sprintf("the interposer failed (code %d)", code)
	}
	return fmt.Errorf("%s: %w", why, wrap)
}

// Serve serves a connection of a process that did not connect to the
// collector's socket (an injected one, whose end of a socketpair the
// injector took), as if it had; f is the collector's end, which Serve
// takes.
func (c *Collector) Serve(f *os.File) error {
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return fmt.Errorf("preload: not a unix socket")
	}
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing {
		uc.Close()
		return fmt.Errorf("preload: collector closed: %w", errs.ErrNotRunning)
	}
	c.track(uc, c.serve)
	return nil
}

// Detached says that the latest image of pid is traced no more, though it
// runs on (its tracing was stopped): its stream ends once its records are
// in, as if it had exited, with status unknown.
func (c *Collector) Detached(pid int) {
	c.enqueue(request{kind: reqDetached, pid: uint32(pid)})
}
