package inbox

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// gateJob is a job for a slotGate test, with a context its handler would run on.
func gateJob() *leased {
	j := &leased{}
	j.ctx, j.cancel = context.WithCancelCause(context.Background())
	return j
}

// A slotGate lets no more handlers run than the slots it holds: a resize below the
// running count cancels them and drops their tokens as they return, so that new
// handlers start only within the new size; a resize up repays what it owes first.
func TestSlotGate(t *testing.T) {
	g := newSlotGate(new(atomic.Int64))
	stop := make(chan struct{})
	g.resize(2, nil)
	a, b, c := gateJob(), gateJob(), gateJob()
	if !g.enter(a, stop) || !g.enter(b, stop) {
		t.Fatal("two slots, two handlers refused")
	}
	// A third waits: ended by its context.
	c.cancel(nil)
	if g.enter(c, stop) {
		t.Fatal("a third handler ran in two slots")
	}
	lost := errors.New("slot lost")
	g.resize(1, lost)
	if context.Cause(a.ctx) != lost || context.Cause(b.ctx) != lost {
		t.Fatal("running handlers not cancelled when their slots went")
	}
	g.leave(a) // dropped: owed
	d := gateJob()
	cancelD := d.cancel
	go func() { cancelD(nil) }()
	if g.enter(d, stop) {
		t.Fatal("a handler ran while the one slot left was in use")
	}
	g.leave(b) // the one slot comes free
	e := gateJob()
	if !g.enter(e, stop) {
		t.Fatal("one slot free, handler refused")
	}
	// Down to none, then up to two while e still runs: e holds one of the two.
	g.resize(0, lost)
	g.resize(2, nil)
	f := gateJob()
	if !g.enter(f, stop) {
		t.Fatal("two slots, one in use: second handler refused")
	}
	h := gateJob()
	h.cancel(nil)
	if g.enter(h, stop) {
		t.Fatal("a third handler ran in two slots")
	}
	g.leave(e)
	g.leave(f)
	if n := g.idle(5); n != 2 {
		t.Fatalf("idle tokens %d, want 2", n)
	}
	close(stop)
	if g.enter(gateJob(), stop) {
		t.Fatal("entered with no slots after stop")
	}
}
