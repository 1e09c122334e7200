package chat

import (
	"context"
	"time"
)

// Flood control, on by default (Config.CommandRate, CommandBurst), as an
// IRC server's: every command a connection sends costs it units of a
// budget that refills at CommandRate units a second up to CommandBurst;
// a connection whose budget is spent waits until it is positive again.
//
// A command costs one unit for each CostBytes (128) bytes it carries (a
// SEND's or SAY's text), the connection's replies to it take, and the
// events it makes the service queue for other clients take (a SAY: its
// ROOM line once for each member of the room), and at least one: a SEND
// of a short message (SENT) costs 1, a WHO with 1,000 users online (9 KB)
// about 71, a HISTORY of HistoryMaxBytes 2,048, a short SAY to a room of
// 10 members 2 and to one of 1,000 about 200. So what a client that
// pipelines expensive commands makes the service write, to itself or to
// others, is held to CommandRate × CostBytes bytes a second (25.6 KB/s by
// default), while a user may send DefaultCommandRate short messages a
// second (the users of H1 flat out send about 55), or a line a second to
// a room of 1,000 after a burst of two: one client cannot make the
// service fan out more than it could write to the client itself.
//
// Waiting is backpressure, not refusal: the connection's reader stops
// reading the socket until the budget is positive (the client's further
// commands wait in the kernel's buffers, then in the client, as when its
// MaxPending commands are taken). Nothing is refused or dropped and the
// client is not disconnected; every command that waited counts in
// Service.ThrottledCommands. The cost of a command's replies (and fan-out)
// is known once it has run, so it is charged to the commands after it: an
// expensive command always runs, and the ones after it wait for it.

// CostBytes is how many bytes of a command's text, or of its replies,
// cost one unit of flood control (see Config.CommandRate).
const CostBytes = 128

// commandBucket is a connection's flood control: a budget of burst units,
// refilled at rate a second. It belongs to the connection's reader
// goroutine, which calls wait before it hands on each command.
type commandBucket struct {
	rate, burst, tokens float64
	last                time.Time
	replied             int64 // the outbox's replied bytes already charged
}

func newCommandBucket(rate float64, burst int) *commandBucket {
	if rate <= 0 {
		return nil
	}
	b := float64(max(burst, 1))
	return &commandBucket{rate: rate, burst: b, tokens: b}
}

// commandBytes is what cmd carries that costs (its text).
func commandBytes(cmd Command) int {
	switch c := cmd.(type) {
	case Send:
		return len(c.Text)
	case Say:
		return len(c.Text)
	}
	return 0
}

// delay charges a command that carries in bytes, and the replies queued
// since the last call (replied is the outbox's running total of reply
// bytes), at now, and returns how long to wait until the budget is
// positive again (0: it is).
func (b *commandBucket) delay(now time.Time, in int, replied int64) time.Duration {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	bytes := float64(in)
	if replied > b.replied {
		bytes += float64(replied - b.replied)
		b.replied = replied
	}
	b.tokens -= max(1, bytes/CostBytes)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// wait charges cmd and the replies queued since the last call, waiting
// until the budget is positive again; it returns whether it waited, and
// false for ok if ctx ended first.
func (b *commandBucket) wait(ctx context.Context, cmd Command, replied int64) (waited, ok bool) {
	d := b.delay(time.Now(), commandBytes(cmd), replied)
	if d <= 0 {
		return false, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true, true
	case <-ctx.Done():
		return true, false
	}
}

// roomLineLen is the length of m's ROOM line on the line protocol
// ("ROOM <room> <from> <text>\n"): what flood control charges a SAY for
// each member of its room.
func roomLineLen(m RoomMsg) int { return len("ROOM   \n") + len(m.Room) + len(m.From) + len(m.Text) }
