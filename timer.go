package gotp

import "time"

// SendAfter sends msg to the process to after d, unless the timer is
// cancelled first with CancelTimer. It returns the timer's reference. If the
// process has exited by then the message is dropped, like any send. Node.Stop
// cancels every pending timer.
func (n *Node) SendAfter(d time.Duration, to PID, msg any) Ref {
	ref := n.MakeRef()
	n.timerMu.Lock()
	defer n.timerMu.Unlock()
	if n.stopping.Load() {
		return ref
	}
	n.timers[ref] = time.AfterFunc(d, func() {
		n.timerMu.Lock()
		_, ok := n.timers[ref]
		delete(n.timers, ref)
		n.timerMu.Unlock()
		if ok {
			n.Send(to, msg)
		}
	})
	return ref
}

// CancelTimer cancels a timer made by SendAfter. It reports whether the
// timer was still pending; after it returns true the message will not be
// sent.
func (n *Node) CancelTimer(ref Ref) bool {
	n.timerMu.Lock()
	t, ok := n.timers[ref]
	delete(n.timers, ref)
	n.timerMu.Unlock()
	if ok {
		t.Stop()
	}
	return ok
}
