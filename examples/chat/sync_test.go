package chat

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotp/gotp"
	"github.com/gotp/gotp/server"
)

// synchronousOf reads SQLite's synchronous setting on db's connection:
// 2 for FULL, 1 for NORMAL. It also checks that FULL comes with fullfsync
// (the flush of the drive's cache where fsync leaves it, on macOS).
func synchronousOf(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v, full, ckpt int
	if err := db.QueryRowContext(t.Context(), `SELECT synchronous, fullfsync, checkpoint_fullfsync FROM pragma_synchronous, pragma_fullfsync, pragma_checkpoint_fullfsync`).Scan(&v, &full, &ckpt); err != nil {
		t.Fatal(err)
	}
	want := 0
	if v == 2 {
		want = 1
	}
	if full != want || ckpt != want {
		t.Errorf("synchronous %d with fullfsync %d and checkpoint_fullfsync %d, want both %d", v, full, ckpt, want)
	}
	return v
}

// A Store flushes each commit (FULL) by default and at checkpoints (NORMAL)
// with SyncNormal, on its writer's connection and its checkpointer's; an
// unknown Sync is refused.
func TestStoreSync(t *testing.T) {
	for _, c := range []struct {
		sync Sync
		want int
	}{{0, 2}, {SyncFull, 2}, {SyncNormal, 1}} {
		t.Run(c.sync.String(), func(t *testing.T) {
			s, err := OpenStore(t.Context(), filepath.Join(t.TempDir(), "h.db"), c.sync)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := synchronousOf(t, s.db); got != c.want {
				t.Errorf("writer: synchronous = %d, want %d", got, c.want)
			}
			if got := synchronousOf(t, s.ckpt); got != c.want {
				t.Errorf("checkpointer: synchronous = %d, want %d", got, c.want)
			}
		})
	}
	if s, err := OpenStore(t.Context(), filepath.Join(t.TempDir(), "h.db"), Sync(7)); err == nil {
		s.Close()
		t.Fatal("OpenStore with Sync(7) succeeded")
	}
}

// The history owner opens its store as its Config says: a Service's zero
// Config flushes each commit.
func TestHistoryOwnerSync(t *testing.T) {
	for _, c := range []struct {
		sync Sync
		want int
	}{{Config{}.withDefaults().HistorySync, 2}, {SyncNormal, 1}} {
		t.Run(c.sync.String(), func(t *testing.T) {
			n := gotp.NewNode(gotp.Options{Name: "sync-test"})
			defer n.Stop(context.Background())
			h := &historyOwner{path: filepath.Join(t.TempDir(), "history.db"), sync: c.sync}
			if _, err := server.Start(t.Context(), n, h); err != nil {
				t.Fatal(err)
			}
			// Start returned after Init: h.store is set, and safe for
			// concurrent use.
			if got := synchronousOf(t, h.store.db); got != c.want {
				t.Errorf("synchronous = %d, want %d", got, c.want)
			}
		})
	}
}

// A Service's history flushes as its Config says: each commit with the zero
// Config, at checkpoints with SyncNormal.
func TestServiceHistorySync(t *testing.T) {
	for _, c := range []struct {
		sync Sync
		want int
	}{{0, 2}, {SyncNormal, 1}} {
		t.Run(c.sync.String(), func(t *testing.T) {
			n := gotp.NewNode(gotp.Options{Name: "sync-test"})
			defer n.Stop(context.Background())
			opened := make(chan *Store, 1)
			svc, err := Start(t.Context(), n, Config{DataDir: t.TempDir(), HistorySync: c.sync,
				onOpen: func(s *Store) {
					select {
					case opened <- s:
					default: // a restarted owner's: the first is the one checked
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Stop(context.Background())
			if got := synchronousOf(t, (<-opened).db); got != c.want {
				t.Errorf("synchronous = %d, want %d", got, c.want)
			}
		})
	}
}

// Start refuses a HistorySync it does not know, before it starts anything.
func TestServiceUnknownHistorySync(t *testing.T) {
	n := gotp.NewNode(gotp.Options{Name: "sync-test"})
	defer n.Stop(context.Background())
	dir := filepath.Join(t.TempDir(), "data")
	if svc, err := Start(t.Context(), n, Config{DataDir: dir, HistorySync: Sync(7)}); err == nil {
		svc.Stop(context.Background())
		t.Fatal("Start with HistorySync Sync(7) succeeded")
	} else if !strings.Contains(err.Error(), "HistorySync Sync(7)") {
		t.Fatalf("Start: %v, want it to name HistorySync Sync(7)", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the data directory was made: %v", err)
	}
}

// ParseSync reads what String writes, in any case (SQLite spells them in
// capitals), and nothing else.
func TestParseSync(t *testing.T) {
	for _, s := range []Sync{SyncFull, SyncNormal} {
		for _, text := range []string{s.String(), strings.ToUpper(s.String())} {
			if got, err := ParseSync(text); err != nil || got != s {
				t.Errorf("ParseSync(%q) = %v, %v", text, got, err)
			}
		}
	}
	for _, bad := range []string{"", "off", "extra", "fulll", "2"} {
		if _, err := ParseSync(bad); err == nil {
			t.Errorf("ParseSync(%q) succeeded", bad)
		}
	}
}
