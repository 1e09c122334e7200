package pg_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/pg"
)

// A worker process joins a group; another process broadcasts a task to the
// group, and the worker receives it as a pg.Message.
func Example() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Name: "demo"})
	defer n.Stop(ctx)
	if _, err := pg.Start(ctx, n, "app:pg", pg.Options{}); err != nil {
		panic(err)
	}

	joined := make(chan struct{})
	done := make(chan struct{})
	n.Spawn(func(p *gotp.Process) error {
		defer close(done)
		group, err := pg.Open(ctx, p, "app:pg")
		if err != nil {
			return err
		}
		defer group.Release()
		if err := group.Join("workers"); err != nil {
			return err
		}
		close(joined)
		msg, err := p.Receive(ctx)
		if err != nil {
			return err
		}
		task := msg.(pg.Message)
		fmt.Println("worker got", task.Topic, task.Payload)
		return nil
	})
	<-joined

	n.Spawn(func(p *gotp.Process) error {
		group, err := pg.Open(ctx, p, "app:pg")
		if err != nil {
			return err
		}
		defer group.Release()
		members, _ := group.Members("workers")
		fmt.Println("members:", len(members))
		return group.Broadcast("workers", "task", 42)
	})
	<-done
	// Output:
	// members: 1
	// worker got task 42
}

// Monitor returns the current members and then reports joins and leaves;
// a member that exits leaves every group at once.
func ExampleInstance_Monitor() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Name: "demo"})
	defer n.Stop(ctx)
	scope, _ := pg.Start(ctx, n, "app:pg", pg.Options{})

	watcher, finished := make(chan struct{}), make(chan struct{})
	n.Spawn(func(p *gotp.Process) error {
		defer close(finished)
		group, _ := scope.Open(p)
		sub, members, _ := group.Monitor("workers")
		fmt.Println("members at start:", len(members))
		close(watcher)
		for ev := range sub.C() {
			fmt.Println(ev.Kind, ev.Group, len(ev.PIDs))
			if ev.Kind == pg.MemberLeft {
				return nil
			}
		}
		return nil
	})
	<-watcher

	joined := make(chan struct{})
	worker, _ := n.Spawn(func(p *gotp.Process) error {
		group, _ := scope.Open(p)
		group.Join("workers", "workers") // joined twice
		close(joined)
		_, err := p.Receive(ctx) // until killed
		return err
	})
	<-joined
	n.Exit(worker, gotp.ErrKill)
	<-finished
	// Output:
	// members at start: 0
	// member.joined workers 1
	// member.joined workers 1
	// member.left workers 2
}

// A policy decides, per permission, group and process, what an instance
// may do.
func ExamplePolicyFunc() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{Name: "demo"})
	defer n.Stop(ctx)
	readOnly := pg.PolicyFunc(func(perm pg.Permission, resource string, pid gotp.PID) bool {
		return perm != pg.PermJoin || resource != "admins"
	})
	scope, _ := pg.Start(ctx, n, "app:pg", pg.Options{Policy: readOnly})

	done := make(chan struct{})
	n.Spawn(func(p *gotp.Process) error {
		defer close(done)
		group, _ := scope.Open(p)
		err := group.Join("admins")
		var denied *pg.DeniedError
		if errors.As(err, &denied) {
			fmt.Println("denied:", denied.Permission, denied.Resource)
		}
		fmt.Println(group.Join("users"))
		return nil
	})
	<-done
	// Output:
	// denied: pg.join admins
	// <nil>
}
