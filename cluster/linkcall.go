package cluster

import (
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// Calls run on the link's goroutine. When the goroutine of a direct link
// reads a call and nothing else is buffered behind it, it runs the
// call's server there if the server is idle (gotp.Gateway.RunInline)
// instead of handing the request to a goroutine of the server's own: the
// request is read, handled and answered (the reply written, see kick) on
// one goroutine, without waking another thread of the program for the
// server and then for the link again. A call that comes behind other
// frames, or to a server that is busy, is delivered to the server's
// mailbox as before.
//
// While the server runs, the socket is free (rsFree): a call the handler
// makes to the same node reads its own reply. A handler that runs long
// (it waits on something, or computes) must not hold up the link:
// rescueTick after rescueTick, a timer armed while calls run here checks
// whether the same call is still running, and if it is (it has run for
// between one and two ticks) a new goroutine takes over reading the link;
// the first one ends when the handler returns. The same happens at once
// for a handler that calls runtime.Goexit. The timer runs only while
// calls ran on the link in the last tick: an idle link has none.
//
// A call runs here only once readFrame has released the peer's frame
// lock: a node-down of the caller's node that comes between reading the
// call and starting its server does not stop the server from handling a
// call it was sent before (the same as a call in its mailbox), but one
// that is seen before it starts does (the call is dropped).
const rescueTick = time.Millisecond

// pendingReq is a call readFrame read for the link's goroutine to run.
type pendingReq struct {
	to  gotp.PID
	req server.Request
	ok  bool
}

// runCall runs the call in l.pend as its server, or delivers it if the
// server is busy. It reports whether this goroutine is still the link's
// reader (it is not after a rescue), and an error that ends the link.
func (l *link) runCall(p *peer) (reader bool, err error) {
	to, req := l.pend.to, l.pend.req
	l.pend = pendingReq{}
	c := l.c
	gw := c.gateway()
	if p.down.Load() {
		return true, nil
	}
	l.rmu.Lock()
	l.inlSeq++
	seq := l.inlSeq
	l.inl, l.rp, l.rstate = seq, p, rsFree
	if !l.ticking {
		l.ticking, l.inlSeen, l.inlLast = true, 0, seq-1
		if l.rescueT == nil {
			l.rescueT = time.AfterFunc(rescueTick, l.tick)
		} else {
			l.rescueT.Reset(rescueTick)
		}
	}
	l.rmu.Unlock()
	returned := false
	defer func() {
		if !returned { // runtime.Goexit in the handler: this goroutine ends
			c.stats.inlineCalls.Add(1)
			l.rmu.Lock()
			if l.inl == seq {
				l.takeOverLocked(true)
			} else {
				// Replaced already, its count in c.wg handed on; its
				// defers mark one done as it ends.
				l.c.wg.Add(1)
			}
			l.rmu.Unlock()
		}
	}()
	ran := gw.RunInline(to, req)
	returned = true
	if ran {
		c.stats.inlineCalls.Add(1)
	} else if !p.down.Load() {
		gw.Send(gotp.PID{}, to, req)
	}
	l.rmu.Lock()
	if l.inl != seq { // replaced meanwhile
		l.rmu.Unlock()
		return false, nil
	}
	l.inl = 0
	l.rmu.Unlock()
	return true, l.reclaim()
}

// tick is the rescue timer's: it replaces the link's reader if the call
// running on it has run since the last tick, and arms the timer again if
// calls ran on the link since then.
func (l *link) tick() {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if l.inl != 0 && l.inl == l.inlSeen {
		l.takeOverLocked(false)
	}
	// A closed link goes on ticking while a call runs on it, so that the
	// call's goroutine is replaced (Leave waits for the reader, not for
	// a handler); no call starts on it after that.
	if l.inl == 0 && l.inlSeq == l.inlLast {
		l.ticking = false // no call ran here since the last tick
		return
	}
	l.inlSeen, l.inlLast = l.inl, l.inlSeq
	l.rescueT.Reset(rescueTick)
}

// takeOverLocked starts a goroutine that becomes the link's reader in
// place of the one running call l.inl (l.rmu held). The new reader takes
// the count in c.wg of the one it replaces (see run), so that Leave does
// not wait for a handler that blocks (Node.Stop does, as for any
// process); unless that one is ending (goexit), its own defers then
// marking its count done.
func (l *link) takeOverLocked(goexit bool) {
	l.inl = 0
	l.c.stats.rescues.Add(1)
	p := l.rp
	if goexit {
		l.c.wg.Add(1) // the ending goroutine's count is not yet done
	}
	go func() {
		replaced := false // in turn: the count went on
		defer func() {
			if !replaced { // also when a handler here calls runtime.Goexit
				l.c.wg.Done()
			}
		}()
		if err := l.reclaim(); err != nil {
			l.close()
			l.c.nodeDown(p, false)
			return
		}
		replaced = l.serve(p)
	}()
}
