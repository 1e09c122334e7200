package gotp

import (
	"context"
	"errors"
	"runtime/debug"
)

// exit ends the process with reason: it is dead for everyone from here
// on. It reports whether this call ended it (false if it was already dead).
//
// The frames on the path from exit to a MonitorFunc callback are kept
// small: the callback (a registry's cleanup, for every process that holds
// a key) usually runs on a handler goroutine's first stack, 2 KB, and a
// stack that outgrows it is copied to one twice the size, which cost about
// a third of the CPU of a registered process's exit. So the work before
// the signals is die's, whose frame is gone when they are sent, and what
// the signals need is in one exitState. The registry's cleanup now ends
// about 1 KB below the top of the stack, some 60 bytes short of where the
// stack must grow when the garbage collector's write barrier is on: a
// larger frame on this path (exit, fireFuncs, or the registry's cleanup)
// brings the growth back, which shows as runtime.newstack under
// runHandler in W4's CPU profile.
func (p *Process) exit(reason error) bool {
	var st exitState
	if !p.die(reason, &st) {
		return false
	}
	n := p.n
	if st.monitoring != nil {
		n.dropMonitors(st.monitoring)
	}
	// MonitorFunc callbacks run first, so that the cleanup they do (a
	// registry dropping the process's entries) is complete before any
	// process can learn of the exit from a link's exit signal or a Down.
	if st.mons != nil {
		n.fireFuncs(&st)
	}
	p.signalExit(&st)
	return true
}

// signalExit sends the signals of an exit whose MonitorFunc callbacks have
// run, and marks it finished. exit calls it, or, if a callback ended the
// goroutine with runtime.Goexit, a deferred call does; only the first call
// does anything.
func (p *Process) signalExit(st *exitState) {
	if st.signalled {
		return
	}
	st.signalled = true
	n := p.n
	// Linked local processes that do not trap exits first: an abnormal
	// reason ends them here and now, names freed, so that a process that
	// traps (a supervisor) hears of this exit only once what died with it
	// is gone, and a restart does not find its names still held.
	if !st.links.empty() {
		n.signalLinks(st)
	}
	if st.mons != nil {
		n.fireDowns(st)
	}
	p.mu.Lock()
	p.exited = true
	var done chan struct{}
	if p.extra != nil {
		done = p.extra.done
	}
	p.mu.Unlock()
	if done != nil {
		close(done)
	}
}

// exitState is what an exiting process's links and monitors are told, and
// who they are.
type exitState struct {
	p          *Process
	reason     error
	links      linkSet
	mons       *refSet[watcher] // monitors of the process
	monitoring *refSet[PID]     // monitors it held
	firstDone  bool             // fireFuncs's callback returned, or its panic was recovered
	signalled  bool             // signalExit has run
}

// die makes p dead with reason, unless it already is (it then returns
// false), and fills st for exit: it takes the process's links and
// monitors, frees its names and takes it out of the node's table.
//
//go:noinline
func (p *Process) die(reason error, st *exitState) bool {
	if errors.Is(reason, ErrKill) {
		reason = ErrKilled
	}
	// The name goes first: whoever learns of the death (a monitor set
	// now fires at once) must find the name free, ready for a successor
	// (a supervisor's restart registers it again).
	p.mu.Lock()
	if p.dead.Load() {
		p.mu.Unlock()
		return false
	}
	early := p.name
	if early != "" {
		p.mu.Unlock()
		p.n.unregisterProcName(early, p)
		p.mu.Lock()
		if p.dead.Load() { // another exit won meanwhile
			p.mu.Unlock()
			return false
		}
	}
	p.dead.Store(true)
	p.reason = reason
	st.p, st.reason = p, reason
	st.links, st.mons, st.monitoring = p.links, p.monitors, p.monitoring
	p.links, p.monitors, p.monitoring = linkSet{}, nil, nil
	name := p.name
	p.queue = nil
	if p.mode == modeFunc && p.waiting {
		p.waiting = false
		p.wake <- wakeExit{} // never blocks: see deliverLocked
	} else if p.resident {
		select { // let the resident goroutine end
		case p.wake <- nil:
		default: // it is running, or already woken
		}
	}
	var cancel context.CancelFunc
	if p.extra != nil {
		cancel = p.extra.cancel
	}
	p.mu.Unlock()

	n := p.n
	if cancel != nil {
		cancel()
	}
	n.table.delete(p.id)
	n.count.Add(-1)
	if name != "" && name != early { // registered while the first name was freed
		n.unregisterProcName(name, p)
	}
	return true
}

// dropMonitors ends the monitors an exiting process held.
//
//go:noinline
func (n *Node) dropMonitors(monitoring *refSet[PID]) {
	for ref, target := range monitoring.all {
		n.dropMonitor(ref, target)
	}
}

// fireFuncs runs the MonitorFunc callbacks of an exiting process. The
// first is called from here, with a panic in it caught by fireOtherFuncs,
// which then runs the others; this frame holds only the callback's Down.
//
//go:noinline
func (n *Node) fireFuncs(st *exitState) {
	defer n.fireOtherFuncs(st)
	if fn := st.mons.one.v.fn; fn != nil {
		fn(Down{Ref: st.mons.one.ref, PID: st.p.Self(), Reason: st.reason})
	}
	st.firstDone = true
}

// fireOtherFuncs, deferred by fireFuncs, logs a panic in the first
// callback and runs the MonitorFunc callbacks beyond the first. If the
// first ended the goroutine with runtime.Goexit (t.FailNow in a test,
// say), exit does not go on: the exit's signals are then sent from here,
// as the goroutine ends, once the other callbacks have run.
func (n *Node) fireOtherFuncs(st *exitState) {
	if v := recover(); v != nil {
		st.firstDone = true // recovered: exit goes on
		n.watcherPanicked(st.mons.one.ref, st.p.Self(), v)
	}
	if !st.firstDone {
		// runtime.Goexit; or a panic(nil) that recover reports as nil
		// (GODEBUG=panicnil=1), after which exit does go on: signalExit
		// sends the signals once however often it is called.
		defer st.p.signalExit(st)
	}
	n.fireMoreFuncs(st)
}

// fireMoreFuncs runs the MonitorFunc callbacks of st.mons.more, taking each
// out of the set before it is called, so that what is left when one ends
// the goroutine with runtime.Goexit is what callMore must still run.
func (n *Node) fireMoreFuncs(st *exitState) {
	for ref, w := range st.mons.more {
		if w.fn != nil {
			delete(st.mons.more, ref)
			n.callMore(st, w.fn, ref)
		}
	}
}

// callMore runs one MonitorFunc callback beyond the first: a panic in it
// is logged; if it calls runtime.Goexit, the callbacks not yet run are run
// and the exit's signals sent, as the goroutine ends.
func (n *Node) callMore(st *exitState, fn func(Down), ref Ref) {
	returned := false
	defer func() {
		if v := recover(); v != nil {
			n.watcherPanicked(ref, st.p.Self(), v)
		} else if !returned {
			defer st.p.signalExit(st)
			n.fireMoreFuncs(st)
		}
	}()
	fn(Down{Ref: ref, PID: st.p.Self(), Reason: st.reason})
	returned = true
}

// fireDowns sends the Down messages of an exiting process.
//
//go:noinline
func (n *Node) fireDowns(st *exitState) {
	for ref, w := range st.mons.all {
		if w.fn == nil {
			n.fire(w, Down{Ref: ref, PID: st.p.Self(), Reason: st.reason})
		}
	}
}

// signalLinks sends the exit signals of an exiting process to the
// processes linked to it, those that do not trap exits first (see exit).
//
//go:noinline
func (n *Node) signalLinks(st *exitState) {
	self := st.p.Self()
	var trapping []PID
	for pid := range st.links.all {
		if q := n.lookup(pid); q != nil {
			q.mu.Lock()
			trap := q.trap
			q.mu.Unlock()
			if trap {
				trapping = append(trapping, pid)
				continue
			}
		}
		n.exitSignal(self, pid, st.reason, true)
	}
	for _, pid := range trapping {
		n.exitSignal(self, pid, st.reason, true)
	}
}

// exitSignal applies an exit signal from the process from. viaLink marks a
// signal caused by the death of a linked process: it is ignored unless
// from is still linked, and it removes the link.
func (p *Process) exitSignal(from PID, reason error, viaLink bool) {
	p.mu.Lock()
	if p.dead.Load() {
		p.mu.Unlock()
		return
	}
	if viaLink {
		if !p.links.del(from) {
			p.mu.Unlock() // unlinked meanwhile: the signal is void
			return
		}
	} else if errors.Is(reason, ErrKill) {
		p.mu.Unlock()
		p.exit(ErrKilled)
		return
	}
	if p.trap {
		p.deliverLocked(Exit{From: from, Reason: reason})
		return
	}
	p.mu.Unlock()
	if reason == nil && from != p.Self() {
		return // a normal exit signal does not end a process that does not trap
	}
	p.exit(reason)
}

// Link links this process with pid: when either ends with an abnormal
// reason, the other receives an exit signal with that reason (and dies,
// unless it traps exits). Linking is idempotent, and linking to oneself does
// nothing. Linking to a process that is not alive returns ErrNoProc.
func (p *Process) Link(pid PID) error { return p.link(pid) }

func (p *Process) link(pid PID) error {
	if pid == p.Self() {
		return nil
	}
	n := p.n
	q := n.lookup(pid)
	if q == nil {
		if !n.isLocal(pid) && pid.node != n.name && !pid.IsZero() {
			if r := n.remote.Load(); r != nil {
				p.mu.Lock()
				p.links.add(pid)
				p.mu.Unlock()
				r.t.Link(p.Self(), pid)
				return nil
			}
		}
		return ErrNoProc
	}
	a, b := p, q
	if a.id > b.id {
		a, b = b, a
	}
	a.mu.Lock()
	b.mu.Lock()
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	if q.dead.Load() || p.dead.Load() {
		return ErrNoProc
	}
	p.links.add(pid)
	q.links.add(p.Self())
	return nil
}

// Unlink removes the link between this process and pid, if any. After
// Unlink returns, no exit signal caused by the link reaches this process.
func (p *Process) Unlink(pid PID) {
	p.mu.Lock()
	p.links.del(pid)
	p.mu.Unlock()
	n := p.n
	if q := n.lookup(pid); q != nil {
		q.mu.Lock()
		q.links.del(p.Self())
		q.mu.Unlock()
		return
	}
	if pid.node != n.name && !pid.IsZero() {
		if r := n.remote.Load(); r != nil {
			r.t.Unlink(p.Self(), pid)
		}
	}
}

// Monitor starts monitoring pid: when it exits this process receives one
// Down message with the reason. If pid is not alive, Down arrives at once
// with ErrNoProc. Each call makes a new monitor.
func (p *Process) Monitor(pid PID) Ref {
	ref := p.n.MakeRef()
	p.mu.Lock()
	if p.dead.Load() {
		p.mu.Unlock()
		return ref
	}
	if p.monitoring == nil {
		p.monitoring = new(refSet[PID])
	}
	p.monitoring.add(ref, pid)
	p.mu.Unlock()
	p.n.monitor(ref, pid, watcher{pid: p.Self()})
	return ref
}

// Demonitor ends the monitor ref. It reports whether the monitor was still
// active (false if its Down was already delivered to the mailbox). After it
// returns no Down of ref arrives; with flush, a Down of ref already in the
// mailbox is removed too, so none is received after Demonitor returns.
func (p *Process) Demonitor(ref Ref, flush bool) bool {
	p.mu.Lock()
	target, ok := p.monitoring.take(ref)
	if flush {
		for i, m := range p.queue {
			if d, isDown := m.(Down); isDown && d.Ref == ref {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				p.delivered-- // gone from the mailbox unreceived
				break
			}
		}
	}
	p.mu.Unlock()
	if flush {
		for i := int(p.rhead); i < len(p.rbuf); i++ {
			if d, isDown := p.rbuf[i].(Down); isDown && d.Ref == ref {
				p.removeLocal(i)
				p.mu.Lock()
				p.delivered-- // gone from the mailbox unreceived
				p.mu.Unlock()
				break
			}
		}
	}
	if !ok {
		return false // already fired: its Down is in the mailbox (or was flushed)
	}
	// The monitor was still ours: no Down will be delivered for it now, even
	// if the target is exiting at this moment (fire checks p.monitoring).
	p.n.dropMonitor(ref, target)
	return true
}

// MonitorFunc calls fn once when the process pid exits, with the Down it
// would have sent; if pid is not alive, fn is called at once on the
// caller's goroutine with ErrNoProc. Otherwise fn runs on the goroutine
// that ends the process, after the process is dead; it must be quick and
// must not block (send a message, close a channel). It is the building
// block for calls and registries that must learn of exits without a
// process of their own. Every fn of a process runs before the exit signals
// of its links are sent and before any Down message of Monitor is
// delivered, so whatever fn does is visible to a process that learns of the
// exit from them. The callbacks of one exit run in no fixed order. A panic
// in fn is logged, and a runtime.Goexit in fn (t.FailNow in a test) ends
// the goroutine running it; either way the other callbacks still run and
// the exit still finishes. Cancel with Node.Demonitor.
func (n *Node) MonitorFunc(pid PID, fn func(Down)) Ref {
	ref := n.MakeRef()
	n.monitor(ref, pid, watcher{fn: fn})
	return ref
}

// Demonitor cancels a monitor made with MonitorFunc and reports whether it
// was still active. After it returns true, fn is not called.
func (n *Node) Demonitor(ref Ref, pid PID) bool { return n.dropMonitor(ref, pid) }

func (n *Node) monitor(ref Ref, pid PID, w watcher) {
	q := n.lookup(pid)
	if q == nil {
		if pid.node != n.name && !pid.IsZero() {
			if r := n.remote.Load(); r != nil {
				r.monitor(ref, pid, w)
				return
			}
		}
		n.fire(w, Down{Ref: ref, PID: pid, Reason: ErrNoProc})
		return
	}
	q.mu.Lock()
	if q.dead.Load() {
		q.mu.Unlock()
		n.fire(w, Down{Ref: ref, PID: pid, Reason: ErrNoProc})
		return
	}
	if q.monitors == nil {
		q.monitors = new(refSet[watcher])
	}
	q.monitors.add(ref, w)
	q.mu.Unlock()
}

// dropMonitor removes the monitor ref from its target and reports whether
// it was there.
func (n *Node) dropMonitor(ref Ref, target PID) bool {
	if q := n.lookup(target); q != nil {
		q.mu.Lock()
		_, ok := q.monitors.take(ref)
		q.mu.Unlock()
		return ok
	}
	if target.node != n.name && !target.IsZero() {
		if r := n.remote.Load(); r != nil {
			return r.demonitor(ref, target)
		}
	}
	return false
}

// fire delivers a Down to its watcher.
func (n *Node) fire(w watcher, d Down) {
	if w.fn != nil {
		n.callWatcher(w.fn, d)
		return
	}
	if w.remote {
		if r := n.remote.Load(); r != nil {
			r.t.Down(d.Ref, w.pid, d.PID, d.Reason)
		}
		return
	}
	if q := n.lookup(w.pid); q != nil {
		q.mu.Lock()
		if _, ok := q.monitoring.take(d.Ref); !ok {
			// The watcher demonitored after the target took the monitor
			// off its list but before this Down was delivered: after
			// Demonitor returns, no Down of the monitor may arrive.
			q.mu.Unlock()
			return
		}
		q.deliverLocked(d)
	}
}

// callWatcher runs a MonitorFunc callback. It runs on the goroutine of
// whoever ended the process, so a panic in it is caught and logged rather
// than allowed to take that goroutine (or the program) down.
func (n *Node) callWatcher(fn func(Down), d Down) {
	defer func() {
		if v := recover(); v != nil {
			n.watcherPanicked(d.Ref, d.PID, v)
		}
	}()
	fn(d)
}

// watcherPanicked logs a panic in the MonitorFunc callback of the monitor
// ref of pid.
func (n *Node) watcherPanicked(ref Ref, pid PID, v any) {
	n.log.Error("gotp: a MonitorFunc callback panicked", "pid", pid, "ref", ref, "panic", v, "stack", string(debug.Stack()))
}
