package inbox_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/gotp/gotp/inbox"
)

// Invoice is a job: the payload stored in the table, as JSON.
type Invoice struct {
	Number int    `json:"number"`
	Client string `json:"client"`
}

// Two instances of an invoice service share one SQLite table; each invoice is
// rendered exactly once.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "invoices.db")

	rendered := make(chan int)
	render := func(ctx context.Context, j inbox.Job[Invoice]) error {
		rendered <- j.Payload.Number
		return nil // ack: the row is deleted
	}
	var queues []*inbox.Queue[Invoice]
	for range 2 { // two instances, each with its own pool
		db, err := inbox.OpenSQLite(ctx, path)
		if err != nil {
			log.Fatal(err)
		}
		defer db.Close()
		q, err := inbox.NewSQLite(db, inbox.Config[Invoice]{Table: "invoice_jobs"})
		if err != nil {
			log.Fatal(err)
		}
		if err := q.CreateTable(ctx); err != nil {
			log.Fatal(err)
		}
		sub, err := q.Subscribe(render, inbox.SubscribeOptions{Workers: 2})
		if err != nil {
			log.Fatal(err)
		}
		if err := sub.Start(ctx); err != nil {
			log.Fatal(err)
		}
		defer sub.Stop(ctx)
		queues = append(queues, q)
	}

	for n := 1; n <= 3; n++ {
		if _, err := queues[0].Publish(ctx, Invoice{Number: n, Client: "Ana"}, nil); err != nil {
			log.Fatal(err)
		}
	}
	sum := 0
	for range 3 {
		sum += <-rendered
	}
	fmt.Println("rendered invoices, numbers summing to", sum)
	// Output: rendered invoices, numbers summing to 6
}
