package gotp_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/gotptest"
)

func TestProcessInfo(t *testing.T) {
	n := gotptest.NewNode(t)
	other := waiter(t, n)
	watcher := waiter(t, n)
	start := time.Now()
	gate, gate2 := make(chan struct{}), make(chan struct{})
	defer close(gate2)
	ready := make(chan struct{})
	pid, err := n.Spawn(func(p *gotp.Process) error {
		if err := p.Link(other); err != nil {
			return err
		}
		p.Monitor(other)
		close(ready)
		for range 2 {
			if _, err := p.Receive(context.Background()); err != nil {
				return err
			}
		}
		<-gate // running, not receiving
		if _, err := p.Receive(context.Background()); err != nil {
			return err
		}
		<-gate2
		return nil
	}, gotp.Named("inspected"), gotp.TrapExit(true), gotp.Behaviour("worker"))
	if err != nil {
		t.Fatal(err)
	}
	gotptest.Recv(t, ready)
	// A process that monitors and then exits: its monitor goes with it.
	gone := make(chan struct{})
	mpid, err := n.Spawn(func(p *gotp.Process) error { p.Monitor(pid); <-gone; return nil })
	if err != nil {
		t.Fatal(err)
	}
	mdown := gotptest.Watch(t, n, mpid) // fires after mpid's own monitors are dropped
	close(gone)
	gotptest.Recv(t, mdown)
	fnRef := n.MonitorFunc(pid, func(gotp.Down) {})
	defer n.Demonitor(fnRef, pid)

	gotptest.Eventually(t, "the process to wait", func() bool { return status(n, pid) == gotp.StatusWaiting })
	in, ok := n.ProcessInfo(pid)
	if !ok {
		t.Fatal("no info for a live process")
	}
	if in.PID != pid || in.Name != "inspected" || in.Behaviour != "worker" || !in.TrapExit || in.Handler {
		t.Errorf("identity fields: %+v", in)
	}
	if in.Started.Before(start.Add(-time.Second)) || in.Started.After(time.Now()) {
		t.Errorf("Started = %v, spawned at about %v", in.Started, start)
	}
	if !slices.Equal(in.Links, []gotp.PID{other}) || !slices.Equal(in.Monitors, []gotp.PID{other}) {
		t.Errorf("Links %v, Monitors %v; want [%v] each", in.Links, in.Monitors, other)
	}
	if !slices.Equal(in.MonitoredBy, []gotp.PID{{}}) {
		t.Errorf("MonitoredBy = %v, want only the MonitorFunc watcher (zero PID)", in.MonitoredBy)
	}
	if in.Handled != 0 || in.MailboxLen != 0 {
		t.Errorf("Handled %d, MailboxLen %d", in.Handled, in.MailboxLen)
	}

	// A live monitoring process is listed.
	mon, _ := run(t, n, func(p *gotp.Process) error {
		p.Monitor(pid)
		_, err := p.Receive(context.Background())
		return err
	})
	gotptest.Eventually(t, "the monitor", func() bool {
		in, _ := n.ProcessInfo(pid)
		return len(in.MonitoredBy) == 2
	})
	if in, _ := n.ProcessInfo(pid); !slices.Contains(in.MonitoredBy, mon) {
		t.Errorf("MonitoredBy %v lacks %v", in.MonitoredBy, mon)
	}
	if in, _ := n.ProcessInfo(watcher); in.Status != gotp.StatusWaiting {
		t.Errorf("idle waiter status %v", in.Status)
	}

	n.Send(pid, 1)
	n.Send(pid, 2)
	gotptest.Eventually(t, "two messages handled", func() bool {
		in, _ := n.ProcessInfo(pid)
		return in.Handled == 2 && in.Status == gotp.StatusRunning
	})
	for i := range 3 {
		n.Send(pid, i)
	}
	if in, _ := n.ProcessInfo(pid); in.MailboxLen != 3 || in.Status != gotp.StatusRunning {
		t.Errorf("MailboxLen %d, Status %v; want 3, running", in.MailboxLen, in.Status)
	}
	close(gate)
	gotptest.Eventually(t, "the third receive", func() bool { in, _ := n.ProcessInfo(pid); return in.Handled == 3 })
	if in, _ := n.ProcessInfo(pid); in.MailboxLen != 2 {
		t.Errorf("MailboxLen after one receive = %d, want 2", in.MailboxLen)
	}
}

func TestProcessInfoHandlerStatus(t *testing.T) {
	n := gotptest.NewNode(t)
	gate := make(chan struct{})
	inside := make(chan struct{})
	h, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		if msg == "block" {
			close(inside)
			<-gate
		}
		return false, nil
	}), nil, gotp.Behaviour("server"))
	if err != nil {
		t.Fatal(err)
	}
	in, _ := n.ProcessInfo(h)
	if in.Status != gotp.StatusWaiting || !in.Handler || in.Behaviour != "server" {
		t.Fatalf("idle handler info %+v", in)
	}
	n.Send(h, "block")
	gotptest.Recv(t, inside)
	n.Send(h, "queued")
	if in, _ := n.ProcessInfo(h); in.Status != gotp.StatusRunning || in.MailboxLen != 1 || in.Handled != 1 {
		t.Fatalf("busy handler info %+v", in)
	}
	close(gate)
	gotptest.Eventually(t, "the handler to go idle", func() bool { in, _ := n.ProcessInfo(h); return in.Status == gotp.StatusWaiting })
	if in, _ := n.ProcessInfo(h); in.Handled != 2 || in.MailboxLen != 0 {
		t.Fatalf("idle again: %+v", in)
	}
}

func TestProcessesAndCount(t *testing.T) {
	n := gotptest.NewNode(t)
	if n.ProcessCount() != 0 || len(n.Processes()) != 0 {
		t.Fatal("a new node has processes")
	}
	var pids []gotp.PID
	for i := range 100 {
		if i%2 == 0 {
			pids = append(pids, waiter(t, n))
			continue
		}
		h, err := n.SpawnHandler(gotp.HandlerFunc(func(*gotp.Process, any) (bool, error) { return true, nil }), nil)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, h)
	}
	if got := n.Processes(); !slices.Equal(got, pids) {
		t.Fatalf("Processes = %v, want %v in spawn order", got, pids)
	}
	if n.ProcessCount() != 100 {
		t.Fatalf("ProcessCount = %d", n.ProcessCount())
	}
	var live []gotp.PID
	for i, pid := range pids {
		if i%3 == 0 {
			d := gotptest.Watch(t, n, pid)
			n.Send(pid, nil)
			gotptest.Recv(t, d)
			if _, ok := n.ProcessInfo(pid); ok || n.IsAlive(pid) {
				t.Fatalf("exited %v still listed", pid)
			}
			continue
		}
		live = append(live, pid)
	}
	if got := n.Processes(); !slices.Equal(got, live) {
		t.Fatalf("Processes = %v, want %v", got, live)
	}
	if n.ProcessCount() != len(live) {
		t.Fatalf("ProcessCount = %d, want %d", n.ProcessCount(), len(live))
	}
}

func TestProcessDictionaryAndDone(t *testing.T) {
	n := gotptest.NewNode(t)
	procs := make(chan *gotp.Process, 1)
	pid, err := n.Spawn(func(p *gotp.Process) error {
		p.SetValue("state", "ready")
		procs <- p
		_, err := p.Receive(context.Background())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p := gotptest.Recv(t, procs)
	if v := p.Value("state"); v != "ready" {
		t.Fatalf("Value = %v", v)
	}
	if v, ok := n.ProcessValue(pid, "state"); !ok || v != "ready" {
		t.Fatalf("ProcessValue = %v, %v", v, ok)
	}
	if v := p.Value("missing"); v != nil {
		t.Fatalf("Value of a missing key = %v", v)
	}
	done := p.Done()
	select {
	case <-done:
		t.Fatal("Done closed while the process lives")
	default:
	}
	n.Exit(pid, errBoom)
	gotptest.Recv(t, done)
	gotptest.Recv(t, p.Done()) // asked for after the exit: already closed
	if _, ok := n.ProcessValue(pid, "state"); ok {
		t.Fatal("ProcessValue of an exited process")
	}

	// A handler-mode process that was never asked for its dictionary.
	h, err := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		procs <- p
		return false, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n.ProcessValue(h, "anything"); !ok || v != nil {
		t.Fatalf("ProcessValue = %v, %v", v, ok)
	}
	n.Send(h, "x")
	hp := gotptest.Recv(t, procs)
	n.Exit(h, gotp.ErrKill)
	gotptest.Recv(t, hp.Done())
}

func TestNodeOptions(t *testing.T) {
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(context.Background())
	if n.Name() != gotp.DefaultNodeName || n.Creation() == 0 || n.Logger() == nil {
		t.Fatalf("defaults: name %q creation %d logger %v", n.Name(), n.Creation(), n.Logger())
	}
	m := gotp.NewNode(gotp.Options{Name: "x", Creation: 7})
	defer m.Stop(context.Background())
	pid := waiter(t, m)
	if pid.Node() != "x" || pid.Creation() != 7 || m.Creation() != 7 {
		t.Fatalf("pid %v", pid)
	}
	if r := m.MakeRef(); r.Node() != "x" || r.Creation() != 7 {
		t.Fatalf("ref %v", r)
	}
}
