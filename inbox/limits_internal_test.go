package inbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Concurrent reserves of Limits.Rate starts (rateReserveSQL) add up: 8 goroutines
// reserving 3 at a time from one window of a Rate of 100 get 100 in all, never
// more, and the counter row holds 100.
func TestRateReserveConcurrent(t *testing.T) {
	url := os.Getenv("POSTGRES_TEST_URL")
	if url == "" {
		t.Skip("POSTGRES_TEST_URL not set")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the table's drop, registered later
	table := fmt.Sprintf("rate_reserve_%d_%d", os.Getpid(), time.Now().UnixNano())
	q, err := NewPostgres(pool, Config[struct{}]{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, limitsDDL(Postgres, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`_limits"`) })
	if _, err := pool.Exec(ctx, `INSERT INTO "`+table+`_limits" (name, window_start, starts) VALUES ('starts', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	const rate, window = 100, 12345
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				var g int
				if err := pool.QueryRow(ctx, q.rateReserveSQL(time.Second), window, 3, rate).Scan(&g); err != nil {
					t.Error(err)
					return
				}
				if g == 0 {
					return
				}
				total.Add(int64(g))
			}
		})
	}
	wg.Wait()
	if n := total.Load(); n != rate {
		t.Fatalf("reserved %d starts in all, Rate %d", n, rate)
	}
	var starts, ws int64
	if err := pool.QueryRow(ctx, `SELECT starts, window_start FROM "`+table+`_limits" WHERE name = 'starts'`).Scan(&starts, &ws); err != nil {
		t.Fatal(err)
	}
	if starts != rate || ws != window {
		t.Fatalf("counter row %d starts in window %d, want %d in %d", starts, ws, rate, window)
	}
	// The next window starts afresh.
	var g int
	if err := pool.QueryRow(ctx, q.rateReserveSQL(time.Second), window+1, 3, rate).Scan(&g); err != nil || g != 3 {
		t.Fatalf("next window: %d, %v", g, err)
	}
}
