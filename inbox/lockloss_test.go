package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp/gotptest"
	"github.com/gotp/gotp/inbox"
)

// BenchmarkLockLoss reports how long a lock form's handler runs on after the
// connection holding its lock dies: from the return of pg_terminate_backend to the
// handler seeing its context cancelled (ms_p50, ms_max). "early" terminates the
// backend as soon as the handler starts, within the first 10 ms in which the
// connection is not yet watched; "running" 50 ms later, the steady state. Each op
// is one loss and the job's second run to its ack.
func BenchmarkLockLoss(b *testing.B) {
	url := pgURL(b)
	for _, form := range []inbox.Form{inbox.RowLock, inbox.AdvisoryLock} {
		for _, when := range []struct {
			name  string
			after time.Duration
		}{{"early", 0}, {"running", 50 * time.Millisecond}} {
			name := map[inbox.Form]string{inbox.RowLock: "rowlock", inbox.AdvisoryLock: "advisory"}[form]
			b.Run(name+"/"+when.name, func(b *testing.B) {
				ctx := context.Background()
				admin, err := pgxpool.New(ctx, url)
				if err != nil {
					b.Fatal(err)
				}
				defer admin.Close()
				pool, app := appPool(b, 4)
				table := fmt.Sprintf("bench_lockloss_%d_%d", os.Getpid(), benchSeq.Add(1))
				defer func() { _, _ = admin.Exec(ctx, `DROP TABLE IF EXISTS "`+table+`"`) }()
				q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: table, Logger: quiet()})
				if err != nil {
					b.Fatal(err)
				}
				if err := q.CreateTable(ctx); err != nil {
					b.Fatal(err)
				}
				inJob := make(chan struct{}, 1)
				cancelled := make(chan time.Time, 1)
				acked := make(chan struct{}, 1)
				var seen sync.Map // job ids run once: RowLock does not count a lost attempt
				sub, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
					if _, again := seen.LoadOrStore(j.ID, true); again {
						return nil
					}
					inJob <- struct{}{}
					<-ctx.Done()
					cancelled <- time.Now()
					return nil
				}, inbox.SubscribeOptions{Form: form, PollInterval: 10 * time.Millisecond, Observe: func(r inbox.Result) {
					if r.Outcome == inbox.Acked && r.SettleErr == nil {
						acked <- struct{}{}
					}
				}})
				if err != nil {
					b.Fatal(err)
				}
				if err := sub.Start(ctx); err != nil {
					b.Fatal(err)
				}
				defer func() {
					sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					if err := sub.Stop(sctx); err != nil {
						b.Error(err)
					}
				}()
				var lat []time.Duration
				b.ResetTimer()
				for range b.N {
					if _, err := q.Publish(ctx, msg{N: 1}, nil); err != nil {
						b.Fatal(err)
					}
					gotptest.Recv(b, inJob)
					if when.after > 0 {
						time.Sleep(when.after) // the handler's own work, as it were
					}
					var n int64
					if err := admin.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
						WHERE datname = current_database() AND application_name = $1) k`, app).Scan(&n); err != nil || n == 0 {
						b.Fatalf("terminate: %d backends, %v", n, err)
					}
					killed := time.Now()
					lat = append(lat, gotptest.Recv(b, cancelled).Sub(killed))
					gotptest.Recv(b, acked)
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2])/1e6, "ms_p50")
				b.ReportMetric(float64(lat[len(lat)-1])/1e6, "ms_max")
			})
		}
	}
}

// freezer is a TCP proxy to Postgres that can stop answering: once frozen it still
// accepts connections and reads what clients send, but forwards nothing either way,
// as a database whose host hangs would. It listens on a port of the test's range.
type freezer struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	thaw   chan struct{} // closed at close: every copy ends

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	var ln net.Listener
	var err error
	for port := 28100; port < 28200; port++ {
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
	}
	if ln == nil {
		t.Fatalf("no free port in 28100-28199: %v", err)
	}
	f := &freezer{ln: ln, target: target, thaw: make(chan struct{})}
	f.wg.Go(f.accept)
	t.Cleanup(f.close)
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

func (f *freezer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.track(c)
		if f.frozen.Load() {
			continue // accepted, never answered
		}
		d, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.track(d)
		f.wg.Go(func() { f.copy(d, c) })
		f.wg.Go(func() { f.copy(c, d) })
	}
}

func (f *freezer) track(c net.Conn) {
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
}

// copy forwards src to dst until either fails; data read while frozen is held
// until close.
func (f *freezer) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if f.frozen.Load() {
				<-f.thaw
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) freeze() { f.frozen.Store(true) }

func (f *freezer) close() {
	f.ln.Close()
	close(f.thaw)
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// A Postgres server that stops answering (its host hangs: connections stay open,
// nothing comes back) while a job is in work cannot hold Stop past its deadline, in
// any form: Stop returns the context's error within its deadline plus 1 s, and every
// goroutine of the subscription has returned soon after.
func TestStopKeepsDeadlineWhenDatabaseNeverAnswers(t *testing.T) {
	url := pgURL(t)
	for _, form := range []inbox.Form{inbox.Lease, inbox.RowLock, inbox.AdvisoryLock} {
		t.Run(map[inbox.Form]string{inbox.Lease: "lease", inbox.RowLock: "rowlock", inbox.AdvisoryLock: "advisory"}[form], func(t *testing.T) {
			t.Parallel()
			b := pgBackend(t)
			defaultTable(t, b)
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			fz := newFreezer(t, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)))
			host, port, _ := net.SplitHostPort(fz.addr())
			cfg.ConnConfig.Host = host
			fmt.Sscan(port, &cfg.ConnConfig.Port)
			cfg.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			q, err := inbox.NewPostgres(pool, inbox.Config[msg]{Table: b.table, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			inJob := make(chan struct{})
			finish := make(chan struct{})
			s, err := q.Subscribe(func(ctx context.Context, j inbox.Job[msg]) error {
				close(inJob)
				<-finish
				return nil
			}, inbox.SubscribeOptions{Workers: 2, Form: form, Lease: 2 * time.Second, PollInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Publish(t.Context(), msg{N: 1}, nil); err != nil {
				t.Fatal(err)
			}
			gotptest.Recv(t, inJob)
			fz.freeze()
			close(finish) // the settlement goes to a database that never answers
			stopWithin(t, s, 300*time.Millisecond)
			gotptest.RecvWithin(t, 3*time.Second, s.Done())
		})
	}
}
