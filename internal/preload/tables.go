//go:build linux && amd64

package preload

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/unwind"
)

// tableServer answers the interposers' requests for unwind tables
// (--unwind tables). A table is built once per file and session (and once
// per user, through the on-disk cache), kept in a sealed memfd, and the
// same memfd is sent to every process that maps the file. Tables of
// different files are built in parallel, up to one per CPU.
type tableServer struct {
	mu     sync.Mutex
	opened bool
	cache  *unwind.Cache // nil: no usable cache folder
	fds    map[string]*tableEntry
	stats  TableStats
	slots  chan struct{} // bounds the builds running at once
}

// tableEntry is one file's table: fd is valid once done is closed.
type tableEntry struct {
	done chan struct{}
	fd   int // -1: none
}

// TableStats says what the session's unwind tables cost.
type TableStats struct {
	Files    int           // tables made (built or read from the cache)
	Built    int           // of which built from CFI
	Bytes    int64         // their total size
	Time     time.Duration // time spent making them, summed over files (built in parallel)
	Failures int           // files that got no table (no CFI, unreadable, untrusted)
}

// TableStats returns what the session's unwind tables cost so far.
func (c *Collector) TableStats() TableStats {
	c.tables.mu.Lock()
	defer c.tables.mu.Unlock()
	return c.tables.stats
}

// startTables serves a table channel: one end of a socketpair a traced
// process sent on its connection (HS_MSG_TABLES).
func (c *Collector) startTables(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_SEQPACKET {
		unix.Close(fd)
		return
	}
	f := os.NewFile(uintptr(fd), "heapscope-tables")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return
	}
	c.track(uc, c.serveTables)
}

func (c *Collector) serveTables(uc *net.UnixConn) {
	buf := make([]byte, tableReqSize+buildIDMax+modulePathMax+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	le := binary.LittleEndian
	for {
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		closeAll(rights(oob[:oobn]))
		if err != nil || n == 0 {
			return
		}
		b := buf[:n]
		if n < tableReqSize || le.Uint32(b) != magic || le.Uint32(b[4:]) != version || le.Uint32(b[8:]) != msgTableReq {
			continue
		}
		idLen, pathLen := uint64(le.Uint32(b[12:])), uint64(le.Uint32(b[16:]))
		if idLen == 0 || idLen > buildIDMax || pathLen == 0 || pathLen > modulePathMax || tableReqSize+idLen+pathLen != uint64(n) {
			continue
		}
		id := append([]byte(nil), b[tableReqSize:tableReqSize+idLen]...)
		path := string(b[tableReqSize+idLen:])
		// one goroutine per request: a large file's build does not hold
		// up the process's other tables (c.wg: Close waits for it)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			fd := c.tables.get(id, path)
			reply := make([]byte, tableMsgSize)
			le.PutUint32(reply, magic)
			le.PutUint32(reply[4:], version)
			le.PutUint32(reply[8:], msgTable)
			le.PutUint32(reply[16:], uint32(len(id)))
			copy(reply[24:], id)
			var rights []byte
			if fd >= 0 {
				rights = unix.UnixRights(fd)
			} else {
				le.PutUint32(reply[12:], 1)
			}
			uc.WriteMsgUnix(reply, rights, nil) // a process that went away needs no answer
		}()
	}
}

// get returns the sealed memfd of the table of the file at path, whose
// build-id must be id, or -1 when there is none. The descriptor stays the
// server's.
func (s *tableServer) get(id []byte, path string) int {
	key := hex.EncodeToString(id)
	s.mu.Lock()
	if e, ok := s.fds[key]; ok {
		s.mu.Unlock()
		<-e.done
		return e.fd
	}
	if s.fds == nil {
		s.fds = map[string]*tableEntry{}
		s.slots = make(chan struct{}, max(1, runtime.NumCPU()))
	}
	if !s.opened {
		s.opened = true
		if c, err := unwind.OpenCache(""); err == nil {
			s.cache = c
		}
	}
	e := &tableEntry{done: make(chan struct{}), fd: -1}
	s.fds[key] = e
	slots := s.slots
	s.mu.Unlock()

	slots <- struct{}{}
	start := time.Now()
	fd, built, size, err := s.make(id, path)
	took := time.Since(start)
	<-slots

	s.mu.Lock()
	if err != nil {
		s.stats.Failures++
	} else {
		e.fd = fd
		s.stats.Files++
		s.stats.Bytes += int64(size)
		if built {
			s.stats.Built++
		}
	}
	s.stats.Time += took
	s.mu.Unlock()
	close(e.done)
	return e.fd
}

// make builds (or reads from the cache) the table of path and puts it in
// a sealed memfd; s.cache is set before any make runs. The path comes from the traced process: the file must be
// a regular file owned by root or by us, writable by no one else, with the
// build-id the process reported.
func (s *tableServer) make(id []byte, path string) (fd int, built bool, size int, err error) {
	// O_NONBLOCK: a FIFO at that path must not hold the server
	ofd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, false, 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(ofd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return -1, false, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || (st.Uid != 0 && int(st.Uid) != os.Geteuid()) || fi.Mode().Perm()&0o022 != 0 {
		return -1, false, 0, fmt.Errorf("%w: owner %d, mode %v", unwind.ErrUntrusted, st.Uid, fi.Mode())
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return -1, false, 0, err
	}
	if !bytes.Equal(unwind.BuildID(ef), id) {
		return -1, false, 0, fmt.Errorf("build-id differs from the loaded file's")
	}
	var t *unwind.Table
	if s.cache != nil {
		t, _ = s.cache.Get(id)
	}
	if t == nil {
		if t, err = unwind.BuildELF(ef); err != nil {
			return -1, false, 0, err
		}
		built = true
		if s.cache != nil {
			s.cache.Put(t) // a table not stored is built again next time: slower, not wrong
		}
	}
	b, err := t.MarshalBinary()
	if err != nil {
		return -1, false, 0, err
	}
	fd, err = sealedMemfd(b)
	return fd, built, len(b), err
}

// sealedMemfd returns a memfd holding b that no one can change any more.
func sealedMemfd(b []byte) (int, error) {
	fd, err := unix.MemfdCreate("heapscope-unwind", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	for off := 0; off < len(b); {
		n, err := unix.Write(fd, b[off:])
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// close releases the memfds.
func (s *tableServer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.fds {
		select {
		case <-e.done:
			if e.fd >= 0 {
				unix.Close(e.fd)
			}
		default: // still building: its builder owns the fd (cannot happen after Close's wait)
		}
	}
	s.fds = nil
}
