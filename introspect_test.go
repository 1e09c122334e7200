package gotp_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestSetLabel(t *testing.T) {
	n, rec := crashNode(t)
	set := make(chan struct{})
	pid, err := n.Spawn(func(p *gotp.Process) error {
		p.SetLabel("user ana")
		close(set)
		_, err := p.Receive(p.Context())
		if err != nil {
			return err
		}
		return errBoom
	})
	if err != nil {
		t.Fatal(err)
	}
	<-set
	if in, _ := n.ProcessInfo(pid); in.Label != "user ana" {
		t.Fatalf("ProcessInfo.Label %q", in.Label)
	}
	done := gotptest.Watch(t, n, pid)
	n.Send(pid, "go")
	gotptest.Recv(t, done)
	if r := oneReport(t, rec, pid); str(r, "label") != "user ana" {
		t.Errorf("crash report label %q", str(r, "label"))
	}
}

func TestSummary(t *testing.T) {
	n, _ := crashNode(t)
	release := make(chan struct{})
	defer close(release)
	quiet := blocker(t, n, release)
	busy := blocker(t, n, release)
	for i := range 5 {
		n.Send(busy, i)
	}
	n.Send(quiet, "one")
	exitOfFunc(t, n, panicky)
	exitOfFunc(t, n, panicky)
	exitOfFunc(t, n, func(*gotp.Process) error { return nil })
	s := n.Summary()
	if s.Processes != n.ProcessCount() || s.Messages != 6 || s.LongestMailbox != 5 || s.LongestPID != busy || s.Crashes != 2 {
		t.Fatalf("Summary %+v, want 6 messages, the longest 5 at %v, 2 crashes", s, busy)
	}
}

func TestMailboxHead(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	pid := blocker(t, n, release)
	for _, m := range []string{"a", "b", "c"} {
		n.Send(pid, m)
	}
	if head, ok := n.MailboxHead(pid, 2); !ok || !slices.Equal(head, []any{"a", "b"}) {
		t.Fatalf("MailboxHead(2) = %v, %v", head, ok)
	}
	if head, ok := n.MailboxHead(pid, 10); !ok || len(head) != 3 {
		t.Fatalf("MailboxHead(10) = %v, %v", head, ok)
	}
	done := gotptest.Watch(t, n, pid)
	close(release)
	gotptest.Recv(t, done)
	if _, ok := n.MailboxHead(pid, 2); ok {
		t.Fatal("MailboxHead of a dead process")
	}
}

// stuckIn blocks until release is closed: the frame ProcessStack must show.
func stuckIn(release <-chan struct{}) { <-release }

func TestProcessStack(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	entered := make(chan struct{})
	h := gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		close(entered)
		stuckIn(release)
		return false, nil
	})
	res, err := n.SpawnHandler(h, nil, gotp.Resident())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := n.SpawnHandler(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Send(res, "block")
	<-entered
	st, ok := n.ProcessStack(res)
	close(release)
	if !ok || !strings.Contains(st, "gotp_test.stuckIn") || !strings.Contains(st, "introspect_test.go") {
		t.Fatalf("ProcessStack = %v:\n%s", ok, st)
	}
	if in, _ := n.ProcessInfo(res); !in.Resident {
		t.Error("ProcessInfo.Resident is false for a resident process")
	}
	if _, ok := n.ProcessStack(plain); ok {
		t.Error("a handler process without a goroutine of its own has a stack")
	}
}

func TestEachProcess(t *testing.T) {
	n := gotptest.NewNode(t)
	release := make(chan struct{})
	defer close(release)
	a := blocker(t, n, release, gotp.Behaviour("importer"))
	blocker(t, n, release, gotp.Behaviour("importer"))
	n.Send(a, 1)
	n.Send(a, 2)
	seen := map[string]int{}
	mail := 0
	n.EachProcess(func(b gotp.ProcessBrief) {
		seen[b.Behaviour]++
		if b.PID == a {
			mail = b.MailboxLen
		}
	})
	if seen["importer"] != 2 || mail != 2 {
		t.Fatalf("EachProcess saw %v, %d messages at a; want 2 importers and 2", seen, mail)
	}
	if time.Since(n.Started()) < 0 || n.Started().IsZero() {
		t.Fatalf("Started %v", n.Started())
	}
}
