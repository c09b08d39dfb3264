package heapscope

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/control"
	"github.com/heapscope/heapscope/internal/registry"
)

// ControlOp is an operation on a session by name.
type ControlOp string

// The control operations.
const (
	ControlQuery ControlOp = "query" // return the session's Status
	ControlFlush ControlOp = "flush" // deliver everything captured so far, then query
	ControlStop  ControlOp = "stop"  // end the session, then return its final Status
)

// Change is an update to a running session. Empty fields change nothing.
type Change struct {
	AddPIDs    []int `json:"add_pids,omitempty"`
	RemovePIDs []int `json:"remove_pids,omitempty"`
	SetPIDs    []int `json:"set_pids,omitempty"` // replace the traced processes with these
	// Stacks, when set, are the event kinds that carry a stack from now
	// on: event.NoStacks for none, 0 for the session's default.
	Stacks *event.KindSet `json:"stacks,omitempty"`
}

// Control performs op on the live session named name, which may run in any
// process, and returns its status. It fails with ErrNotRunning when no live
// session has the name, and with ErrProtocol when the session runs another
// version of heapscope.
func Control(name string, op ControlOp) (Status, error) {
	var st Status
	switch op {
	case ControlQuery, ControlFlush, ControlStop:
	default:
		return st, fmt.Errorf("unknown control operation %q: %w", op, ErrInvalidFlags)
	}
	err := call(name, string(op), nil, &st)
	if err == nil {
		err = checkProtocol(name, st.Protocol)
	}
	return st, err
}

// Update changes the processes and stack-walked events of the live session
// named name, which may run in any process.
func Update(name string, c Change) error {
	var ack updateAck
	if err := call(name, "update", c, &ack); err != nil {
		return err
	}
	return checkProtocol(name, ack.Protocol)
}

// updateAck is a session's answer to an update.
type updateAck struct {
	Protocol int `json:"protocol"`
}

// checkProtocol refuses the answer of a session that speaks another
// protocol: its fields may mean something else.
func checkProtocol(name string, version int) error {
	if version != ControlProtocol {
		return fmt.Errorf("session %q answered in control protocol %d, this heapscope speaks %d: use the heapscope that started it: %w",
			name, version, ControlProtocol, ErrProtocol)
	}
	return nil
}

// Sessions returns the status of the caller's live sessions (and of
// root's, where they share a registry). Sessions that do not answer within
// a few seconds (their owner is busy or gone), or answer in another
// ControlProtocol, are listed with what the registry knows. Sessions of
// other users are not listed.
func Sessions() ([]Status, error) {
	dir, err := registry.Dir()
	if err != nil {
		return nil, err
	}
	infos, err := registry.List(dir)
	if err != nil {
		return nil, err
	}
	// Asked together: one session that does not answer costs the bound
	// once, not once per session.
	out := make([]Status, len(infos))
	var wg sync.WaitGroup
	for i, info := range infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st Status
			// A session of another protocol is listed with what the
			// registry knows, as one that does not answer.
			if err := control.Call(info.Socket, info.UID, string(ControlQuery), nil, &st); err != nil || st.Protocol != ControlProtocol {
				st = Status{Name: info.Name, Owner: info.Owner, Provider: Provider(info.Provider), Started: info.Started}
			}
			out[i] = st
		}()
	}
	wg.Wait()
	return out, nil
}

func call(name, op string, args, out any) error {
	dir, err := registry.Dir()
	if err != nil {
		return err
	}
	info, err := registry.Lookup(dir, name)
	if err != nil {
		return err
	}
	if err := control.Call(info.Socket, info.UID, op, args, out); err != nil {
		return fmt.Errorf("session %q: %w", info.Name, err)
	}
	return nil
}

// handle answers control requests from other processes.
func (s *Session) handle(op string, args json.RawMessage) (any, error) {
	switch ControlOp(op) {
	case ControlQuery:
		return s.Status(), nil
	case ControlFlush:
		if err := s.Flush(); err != nil {
			return nil, err
		}
		return s.Status(), nil
	case ControlStop:
		// Stop closes the control server, which waits for this request:
		// stop from another goroutine and answer once all is drained.
		go s.Stop()
		<-s.drained
		return s.final, nil
	case "update":
		var c Change
		if err := json.Unmarshal(args, &c); err != nil {
			return nil, fmt.Errorf("bad update: %w", err)
		}
		if err := s.Update(c); err != nil {
			return nil, err
		}
		return updateAck{Protocol: ControlProtocol}, nil
	case "leaks":
		var q LeaksQuery
		if err := json.Unmarshal(args, &q); err != nil {
			return nil, fmt.Errorf("bad leaks query: %w", err)
		}
		return s.Leaks(q)
	case "top":
		var q TopQuery
		if err := json.Unmarshal(args, &q); err != nil {
			return nil, fmt.Errorf("bad top query: %w", err)
		}
		return s.Top(q)
	}
	return nil, fmt.Errorf("unknown operation %q", op)
}
