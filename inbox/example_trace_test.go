package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gotp/gotp/inbox"
)

// span is what a tracer keeps of a span: a W3C trace id, its own id and its
// parent's. A real program would use OpenTelemetry's tracer and its
// propagation.TraceContext, whose Inject and Extract read and write the same
// traceparent text through a carrier; the hooks stay as they are.
type span struct {
	name, traceID, spanID, parentID string
}

type spanKey struct{}

// tracer makes spans with ids from a counter, so that the example's output is
// the same on every run (a real tracer draws random ids).
type tracer struct {
	next  atomic.Uint64
	ended chan span
}

func (t *tracer) start(ctx context.Context, name string, parent *span) (context.Context, span) {
	n := t.next.Add(1)
	s := span{name: name, spanID: fmt.Sprintf("%016x", n)}
	if parent != nil {
		s.traceID, s.parentID = parent.traceID, parent.spanID
	} else {
		s.traceID = fmt.Sprintf("%032x", n<<32)
	}
	return context.WithValue(ctx, spanKey{}, s), s
}

// traceparent renders s as a W3C traceparent header: version, trace id, span
// id, flags (sampled).
func traceparent(s span) string { return "00-" + s.traceID + "-" + s.spanID + "-01" }

// parseTraceparent reads a traceparent header into the remote parent span.
func parseTraceparent(h string) (*span, bool) {
	parts := strings.Split(h, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 {
		return nil, false
	}
	return &span{traceID: parts[1], spanID: parts[2]}, true
}

// Hooks span a job from its publish to its handling in another instance: the
// publish hook starts a span and stores its traceparent in the table's trace
// column (the Columns.Trace opt-in); the handle hook reads it back and runs
// the handler under a child span of the same trace.
func ExampleHooks() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "inbox-trace")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "jobs.db")

	tr := &tracer{ended: make(chan span, 4)}
	hooks := inbox.Hooks{
		Publish: func(ctx context.Context, p inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
			var parent *span
			if s, ok := ctx.Value(spanKey{}).(span); ok {
				parent = &s
			}
			ctx, s := tr.start(ctx, "publish "+p.Table, parent)
			id, err := next(ctx, traceparent(s))
			tr.ended <- s
			return id, err
		},
		Handle: func(ctx context.Context, j inbox.JobInfo, next func(context.Context) error) error {
			remote, ok := parseTraceparent(j.Trace)
			if !ok {
				remote = nil // no trace stored: a root span
			}
			ctx, s := tr.start(ctx, "handle "+j.Table, remote)
			err := next(ctx)
			tr.ended <- s
			return err
		},
	}
	// Two instances, each with its own database handle: the trace crosses
	// between them only through the table.
	open := func() (*sql.DB, *inbox.Queue[Invoice]) {
		db, err := inbox.OpenSQLite(ctx, path)
		if err != nil {
			log.Fatal(err)
		}
		cols := inbox.DefaultColumns()
		cols.Trace = "trace"
		q, err := inbox.NewSQLite(db, inbox.Config[Invoice]{Table: "invoices", Columns: cols, Hooks: hooks})
		if err != nil {
			log.Fatal(err)
		}
		return db, q
	}
	dbA, publisher := open()
	defer dbA.Close()
	dbB, worker := open()
	defer dbB.Close()

	// The default schema, plus the opt-in column.
	plain, err := inbox.NewSQLite(dbA, inbox.Config[Invoice]{Table: "invoices"})
	if err != nil {
		log.Fatal(err)
	}
	if err := plain.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := dbA.ExecContext(ctx, `ALTER TABLE invoices ADD COLUMN trace TEXT`); err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{})
	sub, err := worker.Subscribe(func(ctx context.Context, j inbox.Job[Invoice]) error {
		s := ctx.Value(spanKey{}).(span)
		fmt.Printf("rendering invoice %d in trace %s\n", j.Payload.Number, s.traceID)
		close(done)
		return nil
	}, inbox.SubscribeOptions{PollInterval: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// The request that publishes has its own span, the root of the trace.
	reqCtx, _ := tr.start(ctx, "POST /invoices", nil)
	if _, err := publisher.Publish(reqCtx, Invoice{Number: 42, Client: "ana"}, nil); err != nil {
		log.Fatal(err)
	}
	<-done
	stop, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := sub.Stop(stop); err != nil {
		log.Fatal(err)
	}
	pub, handle := <-tr.ended, <-tr.ended
	fmt.Println(pub.name, "span", pub.spanID, "parent", pub.parentID)
	fmt.Println(handle.name, "span", handle.spanID, "parent", handle.parentID)
	fmt.Println("one trace:", pub.traceID == handle.traceID)

	// Output:
	// rendering invoice 42 in trace 00000000000000000000000100000000
	// publish invoices span 0000000000000002 parent 0000000000000001
	// handle invoices span 0000000000000003 parent 0000000000000002
	// one trace: true
}
