// Command inbox is a worker service built on gotp's inbox: it renders
// thumbnails (pretend ones) from a job table that any number of its
// instances share, with the database as their only coordinator.
//
//	go run ./examples/inbox -db jobs.db publish 100    # put 100 jobs in the table
//	go run ./examples/inbox -db jobs.db work           # handle them until Ctrl-C
//	go run ./examples/inbox -db jobs.db stats          # how many are ready, in work, done
//
// Run "work" in several terminals: each job is rendered by one instance.
// With -postgres URL (or DATABASE_URL in the environment) the table is on
// Postgres instead of the SQLite file, and the instances may run on
// different machines.
//
// Each instance is a gotp node whose supervision tree holds the inbox
// subscription (inbox.ChildSpec). A render records its result in a table
// keyed by the job's id, so a job that runs twice (its instance was killed
// after rendering but before acking, and another instance took it when its
// lease ran out) is still recorded once: inbox handlers must be idempotent.
// SIGINT or SIGTERM stops the instance gracefully: jobs in work finish,
// within -stop, and the rest go back to the table at once.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/inbox"
	"github.com/gotp/gotp/supervisor"
)

// Thumbnail is one job: an image to render at a width.
type Thumbnail struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// config is what the command line says.
type config struct {
	sqlitePath  string
	postgresURL string
	table       string
	instance    string
	workers     int
	lease       time.Duration
	work        time.Duration // how long a render takes
	stopTimeout time.Duration
	logLevel    slog.Level
}

func main() {
	var c config
	flag.StringVar(&c.sqlitePath, "db", "jobs.db", "SQLite database file (ignored with -postgres)")
	flag.StringVar(&c.postgresURL, "postgres", os.Getenv("DATABASE_URL"), "Postgres URL (default $DATABASE_URL)")
	flag.StringVar(&c.table, "table", "thumbnail_jobs", "job table; results go to TABLE_done")
	host, _ := os.Hostname()
	flag.StringVar(&c.instance, "name", fmt.Sprintf("%s-%d", host, os.Getpid()), "this instance's name, recorded with each render")
	flag.IntVar(&c.workers, "workers", 4, "jobs in work at once in this instance")
	flag.DurationVar(&c.lease, "lease", inbox.DefaultLease, "how long a claimed job is this instance's before another may take it")
	flag.DurationVar(&c.work, "work", 20*time.Millisecond, "how long a render takes")
	flag.DurationVar(&c.stopTimeout, "stop", 10*time.Second, "how long jobs in work may finish when stopping")
	flag.TextVar(&c.logLevel, "log", slog.LevelWarn, "log level: DEBUG, INFO, WARN or ERROR")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: inbox [flags] publish N | work | stats")
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, c, flag.Args(), os.Stdout)
	if errors.Is(err, errUsage) {
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		os.Exit(1)
	}
}

// errUsage is run's error for a command line that names no command.
var errUsage = errors.New("no command: publish N, work or stats")

// run carries out one command, writing its report to out.
func run(ctx context.Context, c config, args []string, out io.Writer) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.logLevel})).With("instance", c.instance)
	db, err := openDB(ctx, c, logger)
	if err != nil {
		return err
	}
	defer db.close()
	if err := db.q.CreateTable(ctx); err != nil {
		return err
	}
	if err := db.createDone(ctx); err != nil {
		return err
	}

	switch {
	case len(args) == 2 && args[0] == "publish":
		var count int
		if _, err := fmt.Sscan(args[1], &count); err != nil || count < 1 {
			return fmt.Errorf("publish: %q is not a number of jobs", args[1])
		}
		jobs := make([]Thumbnail, count)
		for i := range jobs {
			jobs[i] = Thumbnail{Image: fmt.Sprintf("photo-%04d.jpg", i), Width: 320}
		}
		if err := db.q.PublishBatch(ctx, jobs, nil); err != nil {
			return err
		}
		fmt.Fprintf(out, "published %d jobs\n", count)
		return nil
	case len(args) == 1 && args[0] == "work":
		return work(ctx, c, db, logger, out)
	case len(args) == 1 && args[0] == "stats":
		s, err := db.q.Stats(ctx)
		if err != nil {
			return err
		}
		done, err := db.countDone(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "ready %d, in work %d, delayed %d, dead %d; rendered %d\n", s.Ready, s.InWork, s.Delayed, s.Dead, done)
		return nil
	}
	return errUsage
}

// work runs this instance until ctx ends.
func work(ctx context.Context, c config, db *database, logger *slog.Logger, out io.Writer) error {
	n := gotp.NewNode(gotp.Options{Name: c.instance, Logger: logger})
	var handled atomic.Int64
	render := func(ctx context.Context, job inbox.Job[Thumbnail]) error {
		select { // the rendering itself
		case <-time.After(c.work):
		case <-ctx.Done():
			return ctx.Err() // the claim was lost or we are stopping: not done
		}
		if err := db.recordDone(ctx, job.ID, job.Payload.Image, c.instance); err != nil {
			return err // a failed attempt: retried later
		}
		handled.Add(1)
		return nil // ack: the job leaves the table
	}
	_, err := supervisor.Start(ctx, n, supervisor.Spec{
		Children: []supervisor.ChildSpec{
			withShutdown(inbox.ChildSpec("thumbnails", db.q, render, inbox.SubscribeOptions{
				Workers: c.workers,
				Lease:   c.lease,
			}), c.stopTimeout),
		},
	})
	if err != nil {
		n.Stop(context.Background())
		return err
	}
	fmt.Fprintf(out, "%s: working on %s with %d workers\n", c.instance, db.q.Table(), c.workers)

	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), c.stopTimeout+5*time.Second)
	defer cancel()
	err = n.Stop(stopCtx) // the subscription finishes or releases what it holds
	fmt.Fprintf(out, "%s: stopped, handled %d jobs\n", c.instance, handled.Load())
	return err
}

// withShutdown gives a child d to stop before its supervisor kills it.
func withShutdown(spec supervisor.ChildSpec, d time.Duration) supervisor.ChildSpec {
	spec.Shutdown = d
	return spec
}

// database is the job table and the results table, on SQLite or Postgres.
type database struct {
	q      *inbox.Queue[Thumbnail]
	table  string
	sqlite *sql.DB
	pg     *pgxpool.Pool
}

func openDB(ctx context.Context, c config, logger *slog.Logger) (*database, error) {
	cfg := inbox.Config[Thumbnail]{Table: c.table, Logger: logger}
	d := &database{table: c.table + "_done"}
	var err error
	if c.postgresURL != "" {
		if d.pg, err = pgxpool.New(ctx, c.postgresURL); err != nil {
			return nil, err
		}
		cfg.ListenNotify = true // publishes from any instance wake the others at once
		d.q, err = inbox.NewPostgres(d.pg, cfg)
	} else {
		if d.sqlite, err = inbox.OpenSQLite(ctx, c.sqlitePath); err != nil {
			return nil, err
		}
		d.q, err = inbox.NewSQLite(d.sqlite, cfg)
	}
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *database) close() {
	if d.sqlite != nil {
		d.sqlite.Close()
	}
	if d.pg != nil {
		d.pg.Close()
	}
}

func (d *database) exec(ctx context.Context, query string, args ...any) error {
	if d.pg != nil {
		_, err := d.pg.Exec(ctx, query, args...)
		return err
	}
	_, err := d.sqlite.ExecContext(ctx, query, args...)
	return err
}

func (d *database) createDone(ctx context.Context) error {
	return d.exec(ctx, `CREATE TABLE IF NOT EXISTS `+d.table+` (
		job_id   BIGINT PRIMARY KEY,
		image    TEXT NOT NULL,
		instance TEXT NOT NULL
	)`)
}

// recordDone keeps a render's result; a second render of the same job (a
// retry after a crash) changes nothing.
func (d *database) recordDone(ctx context.Context, id int64, image, instance string) error {
	return d.exec(ctx, `INSERT INTO `+d.table+` (job_id, image, instance) VALUES ($1, $2, $3)
		ON CONFLICT (job_id) DO NOTHING`, id, image, instance)
}

func (d *database) countDone(ctx context.Context) (int64, error) {
	var n int64
	q := `SELECT count(*) FROM ` + d.table
	if d.pg != nil {
		return n, d.pg.QueryRow(ctx, q).Scan(&n)
	}
	return n, d.sqlite.QueryRowContext(ctx, q).Scan(&n)
}
