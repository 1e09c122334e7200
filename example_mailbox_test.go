package gotp_test

import (
	"context"
	"fmt"

	"github.com/gotp/gotp"
)

// A producer outside the process (here the example's own goroutine; in
// the chat, the goroutine reading a client's socket) holds a credit for
// each message it has sent and the process has not yet handled: at most
// four messages ever wait, and the producer waits meanwhile instead of
// growing the mailbox.
func Example_flowControl() {
	n := gotp.NewNode(gotp.Options{Name: "demo"})
	defer n.Stop(context.Background())

	credits := make(chan struct{}, 4)
	done := make(chan int)
	longest, handled := 0, 0
	worker, _ := n.SpawnHandler(gotp.HandlerFunc(func(p *gotp.Process, msg any) (bool, error) {
		longest = max(longest, p.MailboxLen()+1) // those waiting, and this one
		handled++
		<-credits // handled: the producer may send one more
		if msg == 999 {
			done <- handled
		}
		return false, nil
	}), nil)

	for i := range 1000 {
		credits <- struct{}{} // waits while four messages wait
		n.Send(worker, i)
	}
	fmt.Println("handled:", <-done)
	fmt.Println("at most 4 waited:", longest <= 4)
	// Output:
	// handled: 1000
	// at most 4 waited: true
}
