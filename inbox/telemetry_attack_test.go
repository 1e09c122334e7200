package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gotp/gotp/inbox"
)

// A publish hook whose trace text the trace column cannot hold (a NUL byte,
// invalid UTF-8) got a bare SQL error back from Postgres, and SQLite stored it:
// it is now a *HookError on both, for every kind of publish, and nothing is
// inserted.
func TestPublishHookTraceTheColumnCannotHold(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		for _, trace := range []string{"00-abc\x00-01", "00-\xff-01"} {
			q, _ := tracedTable(t, freshBackendFor(t, b), inbox.Hooks{
				Publish: func(ctx context.Context, p inbox.PublishInfo, next func(context.Context, string) (int64, error)) (int64, error) {
					return next(ctx, trace)
				},
			})
			ctx := t.Context()
			isHookErr := func(err error) bool { _, ok := errors.AsType[*inbox.HookError](err); return ok }
			if _, err := q.Publish(ctx, msg{N: 1}, nil); !isHookErr(err) {
				t.Errorf("Publish with trace %q: %v, want a *HookError", trace, err)
			}
			if _, err := q.Publish(ctx, msg{N: 1}, &inbox.PublishOpts{Unique: &inbox.Unique{Key: "k"}}); !isHookErr(err) {
				t.Errorf("unique Publish with trace %q: %v, want a *HookError", trace, err)
			}
			if err := q.PublishBatch(ctx, []msg{{N: 2}, {N: 3}}, nil); !isHookErr(err) {
				t.Errorf("PublishBatch with trace %q: %v, want a *HookError", trace, err)
			}
			if st, err := q.Stats(ctx); err != nil || st != (inbox.Stats{}) {
				t.Errorf("trace %q: stats %+v, %v; want nothing inserted", trace, st, err)
			}
		}
	})
}

// freshBackendFor is a backend of its own on b's database, for a test that makes
// several tables.
func freshBackendFor(t *testing.T, b *backend) *backend { return freshBackend(t, b.dialect) }
