package inbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gotp/gotp/inbox"
)

// Many connections opening one new SQLite file at once: every open succeeds
// and the file ends in WAL mode. Each open turns a new file's rollback journal
// into WAL, which takes a read lock and then upgrades it; an upgrade that meets
// another opener's lock fails with SQLITE_BUSY at once, whatever the busy
// timeout (SQLite does not wait on a lock it could deadlock on), so concurrent
// `gotp inbox migrate` processes failed at open.
func TestOpenSQLiteConcurrentNewFile(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 5
	}
	for r := range rounds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("new%d.db", r))
		if r%2 == 0 { // an empty file, as the CLI test makes, and no file at all
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				db, err := inbox.OpenSQLite(t.Context(), path)
				if err != nil {
					errs[i] = err
					return
				}
				defer db.Close()
				var mode string
				if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
					errs[i] = err
				} else if mode != "wal" {
					errs[i] = fmt.Errorf("journal_mode %q, want wal", mode)
				}
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, opener %d: %v", r, i, err)
			}
		}
	}
}
