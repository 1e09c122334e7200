package gotp

import (
	"bytes"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Summary is a node at one moment, in aggregate: what an observer samples
// every few seconds and a metrics scrape exports, without a row per
// process.
type Summary struct {
	Processes int // live processes
	// Messages is the number of messages waiting in every mailbox;
	// LongestMailbox the longest one, of the process LongestPID (the zero
	// PID when every mailbox is empty).
	Messages       int
	LongestMailbox int
	LongestPID     PID
	// Crashes counts the crash reports since the node started (see
	// Options.Logger), whether or not the logger kept them.
	Crashes uint64
}

// Summary returns the node's Summary. It visits every live process and
// takes each one's lock briefly, one at a time, so it costs O(processes)
// and allocates nothing; spawns and exits go on meanwhile, so the figures
// are each a moment's, not one instant's.
func (n *Node) Summary() Summary {
	s := Summary{Processes: int(n.count.Load()), Crashes: n.crashes.Load()}
	n.table.each(func(p *Process) {
		p.mu.Lock()
		l := p.mailboxLenLocked()
		p.mu.Unlock()
		s.Messages += l
		if l > s.LongestMailbox {
			s.LongestMailbox, s.LongestPID = l, p.Self()
		}
	})
	return s
}

// ProcessBrief is what EachProcess tells of one process: enough to count
// processes by behaviour and mailbox length without a ProcessInfo each.
type ProcessBrief struct {
	PID        PID
	Behaviour  string // the Behaviour spawn option's label
	MailboxLen int
}

// EachProcess calls f with a ProcessBrief of every live process, in no
// particular order. It takes each process's lock briefly, one at a time,
// and never while f runs; it allocates nothing. Processes spawned or
// ended meanwhile may or may not be visited.
func (n *Node) EachProcess(f func(ProcessBrief)) {
	n.table.each(func(p *Process) {
		p.mu.Lock()
		l := p.mailboxLenLocked()
		p.mu.Unlock()
		f(ProcessBrief{PID: p.Self(), Behaviour: p.label, MailboxLen: l})
	})
}

// MailboxHead returns up to max of the messages queued for the live local
// process pid, oldest first, and whether pid is such a process. These are
// the messages its goroutine has not yet taken into its own buffer: a
// process that is busy with a burst has taken the burst (it counts in
// ProcessInfo.MailboxLen, but only the process itself may read it), so
// what MailboxHead shows may start after the true head of the mailbox.
// The messages are the values sent (not copies): read them, never change
// them. It takes the process's lock briefly and is safe from any
// goroutine.
func (n *Node) MailboxHead(pid PID, max int) ([]any, bool) {
	p := n.lookup(pid)
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead.Load() {
		return nil, false
	}
	k := min(max, len(p.queue))
	if k <= 0 {
		return nil, true
	}
	return append([]any(nil), p.queue[:k]...), true
}

// pidLabel is the pprof goroutine label that names the process of a
// resident goroutine.
const pidLabel = "gotp_pid"

// ProcessStack returns the stack of the goroutine of the live local
// Resident process pid (a supervisor, a server.Dedicated server), as
// runtime/pprof's goroutine profile shows it: one frame a line, innermost
// first. It reports false for a process that has no goroutine of its own
// for life (a handler-mode process that is not resident: its goroutine
// comes and goes with its messages; a function process: see below).
//
// It takes a goroutine profile of the whole program, which costs time in
// proportion to the number of goroutines (and a brief stop of the world):
// it is meant for an operator looking at one process, not for polling.
// Function processes (Spawn) are not labelled, because labelling costs
// each spawn an allocation; their stacks are in the full goroutine dump.
func (n *Node) ProcessStack(pid PID) (string, bool) {
	p := n.lookup(pid)
	if p == nil || !p.resident || p.dead.Load() {
		return "", false
	}
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return "", false
	}
	return findLabelled(buf.Bytes(), `"`+pidLabel+`":"`+pid.String()+`"`)
}

// findLabelled returns the frames of the record of a goroutine profile
// (debug=1 text: records apart by blank lines, each a count line, a
// "# labels:" line if the goroutines have labels, and a "#\t" line a
// frame) whose labels contain label.
func findLabelled(profile []byte, label string) (string, bool) {
	for rec := range bytes.SplitSeq(profile, []byte("\n\n")) {
		var frames []string
		found := false
		for line := range strings.SplitSeq(string(rec), "\n") {
			switch {
			case strings.HasPrefix(line, "# labels: "):
				found = strings.Contains(line, label)
			case strings.HasPrefix(line, "#\t"):
				frames = append(frames, formatFrame(line[2:]))
			}
		}
		if found {
			return strings.Join(frames, "\n"), true
		}
	}
	return "", false
}

// formatFrame turns "0x4a1b2c\tpkg.fn+0x2f\t\t/path/file.go:42" into
// "pkg.fn /path/file.go:42".
func formatFrame(s string) string {
	var f []string
	for _, x := range strings.Split(s, "\t") {
		if x = strings.TrimSpace(x); x != "" {
			f = append(f, x)
		}
	}
	if len(f) < 3 {
		return strings.Join(f, " ")
	}
	fn := f[1]
	if i := strings.LastIndex(fn, "+0x"); i > 0 {
		if _, err := strconv.ParseUint(fn[i+3:], 16, 64); err == nil {
			fn = fn[:i]
		}
	}
	return fn + " " + f[2]
}
