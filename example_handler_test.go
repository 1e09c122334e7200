package gotp_test

import (
	"context"
	"fmt"

	"github.com/gotp/gotp"
)

// A handler-mode process runs its handler once per message and holds no
// goroutine while its mailbox is empty.
func ExampleNode_SpawnHandler() {
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(context.Background())

	type add struct{ n int }
	type get struct{ reply chan int }
	total := 0
	counter, _ := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		switch m := msg.(type) {
		case add:
			total += m.n
		case get:
			m.reply <- total
		}
		return false, nil
	}), nil, gotp.Named("counter"))

	for i := 1; i <= 4; i++ {
		n.Send(counter, add{i})
	}
	reply := make(chan int)
	n.SendTo(gotp.Name("counter"), get{reply})
	fmt.Println(<-reply)
	// Output: 10
}
