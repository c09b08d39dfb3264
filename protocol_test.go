package heapscope

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/control"
	"github.com/heapscope/heapscope/internal/registry"
)

// TestControlProtocolMismatch: a live session that answers in another
// control protocol (another heapscope's, here one that predates the
// version field) is refused with ErrProtocol, one error naming both
// versions, by Control and Update; Sessions lists it with what the
// registry knows, not with its answer.
func TestControlProtocolMismatch(t *testing.T) {
	dir, err := registry.Dir()
	if err != nil {
		t.Fatal(err)
	}
	const name = "old-protocol"
	entry, err := registry.Acquire(dir, registry.Info{Name: name, Owner: os.Getpid(),
		Socket: registry.SocketPath(dir, name), Provider: string(ProviderEBPF), Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer entry.Release()
	srv, err := control.Listen(entry.Info.Socket, func(op string, _ json.RawMessage) (any, error) {
		if op == "update" {
			return nil, nil // the old protocol's acknowledgement
		}
		return map[string]any{"name": name, "owner": os.Getpid(), "pids": []int{4242}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	_, err = Control(name, ControlQuery)
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "protocol 0") || !strings.Contains(err.Error(), "speaks 2") {
		t.Errorf("Control of an old session: %v, want ErrProtocol naming protocols 0 and %d", err, ControlProtocol)
	}
	if err := Update(name, Change{AddPIDs: []int{1}}); !errors.Is(err, ErrProtocol) {
		t.Errorf("Update of an old session: %v, want ErrProtocol", err)
	}
	list, err := Sessions()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(st Status) bool { return st.Name == name })
	if i < 0 || len(list[i].PIDs) != 0 || list[i].Provider != ProviderEBPF {
		t.Errorf("Sessions: %+v; want %q listed from the registry (provider ebpf, no pids)", list, name)
	}
}
