package ebpf

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// loadCollection loads spec as ebpf.NewCollection does, but its programs
// side by side: the maps first, then each program, with the same maps, in
// a goroutine of its own. The verifier's time is most of a load, and it
// runs on the loading thread: on a machine with more than one core the
// load takes about as long as its longest program.
func loadCollection(spec *ebpf.CollectionSpec, ph *phases) (*ebpf.Collection, error) {
	start := time.Now()
	// One cache of the kernel's BTF for every program (a program that
	// needs it, a tp_btf one or one calling a kfunc, would otherwise parse
	// it again), parsed while the maps are made.
	cache := btf.NewCache()
	kernelBTF := make(chan struct{})
	began := start
	go func() {
		defer close(kernelBTF)
		for _, ps := range spec.Programs {
			if ps.Type == ebpf.Tracing {
				cache.Kernel()
				ph.since("kernel BTF read", 0, began)
				return
			}
		}
	}()
	defer func() { <-kernelBTF }()
	mapsOnly := &ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	base, err := ebpf.NewCollection(mapsOnly)
	if err != nil {
		return nil, err
	}
	ph.since("BPF maps made", 0, start)
	start = time.Now()
	names := make([]string, 0, len(spec.Programs))
	for name := range spec.Programs {
		names = append(names, name)
	}
	sort.Strings(names)
	progs := make([]*ebpf.Program, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := &ebpf.CollectionSpec{
				Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder,
				Programs: map[string]*ebpf.ProgramSpec{name: spec.Programs[name]},
			}
			c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: base.Maps, Cache: cache})
			if err != nil {
				errs[i] = err
				return
			}
			progs[i] = c.DetachProgram(name)
			ph.since("BPF program "+name+" verified", 0, start)
			c.Close() // its maps are clones of base's
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range progs {
			if p != nil {
				p.Close()
			}
		}
		base.Close()
		return nil, err
	}
	coll := &ebpf.Collection{Programs: map[string]*ebpf.Program{}, Maps: base.Maps, Variables: base.Variables}
	for i, name := range names {
		if progs[i] == nil {
			base.Close()
			return nil, fmt.Errorf("program %s: not loaded", name)
		}
		coll.Programs[name] = progs[i]
	}
	return coll, nil
}
