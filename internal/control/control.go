// Package control carries requests to a running session from other processes
// over its unix socket: one JSON request, one JSON response per connection.
package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// Request is what a client asks.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response is the answer: a result, or an error with the name of the
// sentinel it wraps so errors.Is works across processes.
type Response struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Kind   string          `json:"kind,omitempty"`
}

// sentinels maps the errors that cross the socket to their wire names.
var sentinels = map[string]error{
	"already_exists":  errs.ErrAlreadyExists,
	"name_too_long":   errs.ErrNameTooLong,
	"invalid_flags":   errs.ErrInvalidFlags,
	"out_of_memory":   errs.ErrOutOfMemory,
	"access_denied":   errs.ErrAccessDenied,
	"no_such_process": errs.ErrNoSuchProcess,
	"not_running":     errs.ErrNotRunning,
	"unavailable":     errs.ErrUnavailable,
}

// Handler answers one request.
type Handler func(op string, args json.RawMessage) (any, error)

// Server accepts control connections for one session.
type Server struct {
	ln      net.Listener
	path    string
	handler Handler
	wg      sync.WaitGroup
}

// Listen makes the socket at path (replacing a stale one) and serves
// requests with h until Close.
func Listen(path string, h Handler) (*Server, error) {
	os.Remove(path) // a dead session's socket; the registry lock says it is ours now
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Only the owner (and root) may control the session.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &Server{ln: ln, path: path, handler: h}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
		}()
	}
}

func (s *Server) handle(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	// The socket is 0600, but it had the umask's mode between bind and
	// chmod: the peer's credentials are what count.
	if uid, _, err := peer(c); err != nil || (uid != os.Geteuid() && uid != 0) {
		json.NewEncoder(c).Encode(Response{Error: "control: only the session's owner and root may control it", Kind: "access_denied"})
		return
	}
	var req Request
	if err := json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&req); err != nil {
		json.NewEncoder(c).Encode(Response{Error: "bad request: " + err.Error()})
		return
	}
	result, err := s.handler(req.Op, req.Args)
	var resp Response
	if err != nil {
		resp.Error = err.Error()
		for name, e := range sentinels {
			if errors.Is(err, e) {
				resp.Kind = name
			}
		}
	} else if result != nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			resp.Error = merr.Error()
		}
		resp.Result = b
	}
	json.NewEncoder(c).Encode(resp)
}

// Close stops accepting, waits for requests in progress, and removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	os.Remove(s.path)
	return err
}

// remoteError is an error from the other side, wrapping its sentinel.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// The bounds of one exchange with a session: a query only reads counters;
// stop, flush and update drain the session's buffers to its file first.
const (
	QueryTimeout = 3 * time.Second
	DrainTimeout = 30 * time.Second
)

// Timeout returns the bound of an exchange for op.
func Timeout(op string) time.Duration {
	if op == "query" {
		return QueryTimeout
	}
	return DrainTimeout
}

// peer returns the uid and pid of the process at the other end of c.
func peer(c net.Conn) (uid, pid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, fmt.Errorf("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// Call sends one request to the session listening at path, which must run
// as uid, and decodes the result into out (which may be nil). The socket
// must be a socket of uid's, and the process that accepts the connection
// must run as uid (SO_PEERCRED): anything else fails with ErrAccessDenied
// before a byte is sent. The whole exchange is bounded by Timeout(op).
func Call(path string, uid int, op string, args, out any) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%w: %v", errs.ErrNotRunning, &os.PathError{Op: "stat", Path: path, Err: err})
		}
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != uid {
		return fmt.Errorf("control socket %s is not a socket of uid %d (mode %#o, uid %d): %w", path, uid, st.Mode, st.Uid, errs.ErrAccessDenied)
	}
	deadline := time.Now().Add(Timeout(op))
	c, err := net.DialTimeout("unix", path, time.Until(deadline))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w: %v", errs.ErrNotRunning, err)
		}
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("%w: %v", errs.ErrAccessDenied, err)
		}
		return err
	}
	defer c.Close()
	if puid, ppid, err := peer(c); err != nil || puid != uid {
		return fmt.Errorf("control socket %s is answered by pid %d of uid %d, not by the session's owner (uid %d) (%v): %w",
			path, ppid, puid, uid, err, errs.ErrAccessDenied)
	}
	c.SetDeadline(deadline)
	req := Request{Op: op}
	if args != nil {
		if req.Args, err = json.Marshal(args); err != nil {
			return err
		}
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	var resp Response
	if err := json.NewDecoder(io.LimitReader(c, 64<<20)).Decode(&resp); err != nil {
		return fmt.Errorf("reading the session's answer: %w", err)
	}
	if resp.Error != "" {
		return &remoteError{msg: resp.Error, sentinel: sentinels[resp.Kind]}
	}
	if out != nil && len(resp.Result) > 0 {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}
