package server_test

import (
	"context"
	"fmt"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// counter keeps a running total; it needs only HandleCall.
type counter struct {
	server.Defaults
	total int
}

func (c *counter) HandleCall(p *gotp.Process, from server.From, req any) (any, error) {
	c.total += req.(int)
	return c.total, nil
}

func Example() {
	ctx := context.Background()
	n := gotp.NewNode(gotp.Options{})
	defer n.Stop(ctx)

	pid, err := server.Start(ctx, n, &counter{}, server.Named("counter"))
	if err != nil {
		panic(err)
	}
	server.Call[int](ctx, n, pid, 2)
	total, err := server.Call[int](ctx, n, gotp.Name("counter"), 3)
	fmt.Println(total, err)
	// Output: 5 <nil>
}
