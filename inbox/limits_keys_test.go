package inbox_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

// manyKeys publishes jobs jobs for each of keys partition keys ("k0".."kK-1"),
// key-major, straight into the default schema: job i has key i/jobs*7919 mod keys
// (keys not a multiple of 7919), so that the keys' order (a take walks them in
// order from a random key) is not the order they were published in.
func manyKeys(t *testing.T, b *backend, keys, jobs int) {
	t.Helper()
	n := keys * jobs
	if b.dialect == inbox.SQLite {
		b.exec(t, `WITH RECURSIVE i(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM i WHERE i + 1 < ?1)
			INSERT INTO "`+b.table+`" (payload, partition_key) SELECT CAST('{"n":' || i || '}' AS BLOB), 'k' || ((i / ?2) * 7919 % ?3) FROM i`, n, jobs, keys)
		return
	}
	b.exec(t, `INSERT INTO "`+b.table+`" (payload, partition_key)
		SELECT convert_to('{"n":' || i || '}', 'UTF8'), 'k' || ((i / $2) * 7919 % $3) FROM generate_series(0, $1::int - 1) AS i`, n, jobs, keys)
}

// Thousands of partition keys with a few jobs each under PerPartition (a careless
// tenant model: one key per customer): two instances drain every job once, never
// more than PerPartition of a key in work; keys are served in turn (in key
// order from a random key), not in claim order (the first keys to start are not all of those published
// first); the lanes' own bookkeeping stays within their workers
// whatever the keys; and once the table is idle the keys' places are swept from
// TABLE_limits. 200 keys of 2 jobs here; with INBOX_FAULT=1 5,000 of 3 on Postgres,
// 2,000 of 2 on SQLite.
func TestLimitsPerPartitionThousandsOfKeys(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		keys, per := 200, 2
		if v := os.Getenv("INBOX_TEST_KEYS"); v != "" {
			fmt.Sscan(v, &keys)
		}
		if os.Getenv("INBOX_FAULT") != "" {
			// On SQLite under -race about 70 jobs/s: some 3.5 minutes. (When
			// each take of places walked every ready key, 5,000 keys of 3
			// drained 4,662 jobs in 5 minutes there.)
			keys, per = 5000, 3
		}
		n := keys * per
		groupTable(t, b)
		manyKeys(t, b, keys, per)
		limits := inbox.Limits{PerPartition: 1}
		g := newGauge()
		done := newTally(n)
		var mu sync.Mutex
		var firstKeys []int // keys in the order of their first start
		seen := map[int]bool{}
		var subs []*inbox.Subscription[msg]
		began := time.Now()
		for range 2 {
			subs = append(subs, start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
				ki := j.Payload.N / per
				k := fmt.Sprint("k", ki*7919%keys)
				mu.Lock()
				if !seen[ki] {
					seen[ki] = true
					firstKeys = append(firstKeys, ki)
				}
				mu.Unlock()
				g.enter(k)
				g.leave(k)
				done.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 8, PollInterval: 50 * time.Millisecond, Limits: limits}))
		}
		done.wait(t, 5*time.Minute)
		// In claim order the first fifth of the keys to start would all be of
		// the first half of the keys (published first); in turn, about half
		// (fewer than a fifth of them by chance: p < 1e-4 at 200 keys).
		late := 0
		for _, k := range firstKeys[:keys/5] {
			if k >= keys/2 {
				late++
			}
		}
		t.Logf("%d keys x %d jobs drained in %v (%.0f jobs/s); of the first %d keys to start, %d of the later half", keys, per, time.Since(began), float64(n)/time.Since(began).Seconds(), keys/5, late)
		done.exactlyOnce(t)
		for k, m := range g.keyMax {
			if m > limits.PerPartition {
				t.Errorf("key %s had %d jobs in work at once, limit %d", k, m, limits.PerPartition)
			}
		}
		if late < keys/5/5 {
			t.Errorf("of the first %d keys to start only %d were of the later half: keys were served in claim order, not in turn", keys/5, late)
		}
		for _, s := range subs {
			within(t, 10*time.Second, func() bool { return inbox.KeyBookkeeping(s) == 0 }, "the lanes' key bookkeeping empty once idle")
		}
		within(t, 30*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits" WHERE name LIKE 'p %'`) == 0
		}, "the places of every key swept once the table is idle")
	})
}

// The places of keys that ran dry are deleted as their last rows' settlements
// are written, not left for the sweep: with a poll and a lease of minutes (the
// sweep runs once per poll while a lane is idle, and once at its first take),
// TABLE_limits holds no place soon after a drain of 200 keys of 2 jobs by two
// instances. (Deleted before the acks were written, the keys' rows were still in
// work and the places stayed: hundreds of them until the next sweep.)
func TestLimitsPlacesDeletedAsKeysRunDry(t *testing.T) {
	eachDB(t, func(t *testing.T, b *backend) {
		const keys, per = 200, 2
		groupTable(t, b)
		manyKeys(t, b, keys, per)
		done := newTally(keys * per)
		for range 2 {
			start(t, newQueue(t, b, inbox.Config[msg]{Columns: inbox.GroupColumns()}), func(ctx context.Context, j inbox.Job[msg]) error {
				done.add(j.Payload.N)
				return nil
			}, inbox.SubscribeOptions{Workers: 8, PollInterval: time.Minute, Lease: 5 * time.Minute, Limits: inbox.Limits{PerPartition: 1}})
		}
		done.wait(t, time.Minute)
		done.exactlyOnce(t)
		within(t, 10*time.Second, func() bool {
			return b.queryN(t, `SELECT count(*) FROM "`+b.table+`_limits" WHERE name LIKE 'p %'`) == 0
		}, "no place left in TABLE_limits soon after the drain")
	})
}
