package registry_test

import (
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/registry"
)

func TestInfo(t *testing.T) {
	n := gotptest.NewNode(t)
	for _, kind := range []registry.Kind{registry.Unique, registry.Duplicate} {
		r := start[string, int](t, n, registry.Options{Kind: kind, Partitions: 4})
		regs := make(chan struct{})
		pid, _ := n.Spawn(func(p *gotp.Process) error {
			for _, k := range []string{"a", "b", "c"} {
				if err := r.Register(p, k, 1); err != nil {
					return err
				}
			}
			if kind == registry.Duplicate {
				r.Register(p, "a", 2) // a second entry under one key
			}
			close(regs)
			_, err := p.Receive(p.Context())
			return err
		})
		<-regs
		in := r.Info()
		wantEntries := 3
		if kind == registry.Duplicate {
			wantEntries = 4
		}
		sum := 0
		for _, k := range in.Keys {
			sum += k
		}
		if !in.Running || in.Kind != kind || in.Partitions != 4 || len(in.Keys) != 4 || in.Entries != wantEntries || sum != 3 {
			t.Fatalf("%v: Info = %+v, want 4 partitions, %d entries, 3 keys", kind, in, wantEntries)
		}
		n.Exit(pid, gotp.ErrKill)
	}
}
