package inbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// placesPG is a queue of the places tests on Postgres, or a skip without one.
func placesPG(t *testing.T) *Queue[struct{}] {
	url := os.Getenv("POSTGRES_TEST_URL")
	if url == "" {
		t.Skip("no POSTGRES_TEST_URL")
	}
	return propPostgres(t, url)
}

// placesFill publishes per rows for each of keys keys, k0000 on, and returns the keys.
func placesFill(t *testing.T, q *Queue[struct{}], keys, per int) []string {
	ctx := context.Background()
	var ks []string
	for i := range keys {
		k := fmt.Sprintf("k%04d", i)
		ks = append(ks, k)
		jobs := make([]struct{}, per)
		if err := q.PublishBatch(ctx, jobs, &PublishOpts{Partition: k}); err != nil {
			t.Fatal(err)
		}
	}
	return ks
}

// pgCode is err's SQLSTATE, or "other".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return "other"
}

// Four lanes take the places of 40 new keys (no place rows yet) at once, each
// from its own cursor: no place goes to two lanes, and no take fails. Before the
// takes inserted new places in name order, they inserted them in walk order,
// which starts at each lane's cursor, and deadlocked (40P01) in 15 of 40 rounds.
func TestPlacesConcurrentFirstTakes(t *testing.T) {
	q := placesPG(t)
	ctx := context.Background()
	keys := placesFill(t, q, 40, 1)
	const lanes, k, n = 4, 40, 1
	errs := map[string]int{}
	var mu sync.Mutex
	for round := range 40 {
		if _, err := q.pool.Exec(ctx, "DELETE FROM "+q.limitsTable()+" WHERE name LIKE 'p %'"); err != nil {
			t.Fatal(err)
		}
		now := trunc(time.Now().Add(time.Hour))
		held := map[string]int64{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for l := range lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cur := keyCursor{key: keys[(l*len(keys)/lanes+round*7)%len(keys)], set: true}
				<-start
				_, got, _, _, err := q.keyTake(ctx, &cur, nil, nil, nil, int64(l+1), time.Time{}, now.Add(time.Minute), now, k, n, 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs[pgCode(err)]++
					t.Logf("round %d lane %d: %v", round, l, err)
					return
				}
				for _, name := range got {
					if o, dup := held[name]; dup {
						t.Errorf("place %s taken by lanes %d and %d", name, o, l+1)
					}
					held[name] = int64(l + 1)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	t.Logf("errors by SQLSTATE: %v", errs)
	if len(errs) > 0 {
		t.Errorf("takes failed: %v", errs)
	}
}

// Six lanes take, give back (giveBackPlaces, with the keys gone, or with their
// next take) and sweep the places of a few keys at once, while the keys' rows
// are deleted and published again: no place is taken by two lanes under live
// leases, and no statement fails. It runs 3 s (INBOX_FAULT=1: 15 s).
func TestPlacesHammer(t *testing.T) {
	q := placesPG(t)
	ctx := context.Background()
	keys := placesFill(t, q, 6, 2)
	const lanes, n = 6, 2
	lease := time.Minute
	type hold struct {
		tag   int64
		until time.Time
	}
	var mu sync.Mutex
	reg := map[string]hold{}
	errs := map[string]int{}
	var takes, gives atomic.Int64
	d := 3 * time.Second
	if os.Getenv("INBOX_FAULT") != "" {
		d = 15 * time.Second
	}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := int64(1000 + l)
			var held, back, gone []string // back and gone: to give back with the next take
			var until time.Time
			var cur keyCursor
			for time.Now().Before(stop) {
				now := trunc(time.Now().Add(time.Hour))
				switch rand.IntN(6) {
				case 0, 1, 2:
					dl := now.Add(lease)
					kept, got, _, _, err := q.keyTake(ctx, &cur, held, back, gone, tag, until, dl, now, rand.IntN(4), n, 1)
					mu.Lock()
					if err != nil {
						errs["take "+pgCode(err)]++
						mu.Unlock()
						continue
					}
					if len(back) > 0 {
						gives.Add(1)
					}
					back, gone = nil, nil
					takes.Add(1)
					for _, name := range got {
						if h, ok := reg[name]; ok && h.until.After(now) {
							t.Errorf("lane %d took %s, held by %d until %v", tag, name, h.tag, h.until)
						}
					}
					held = append(kept, got...)
					until = dl
					for _, name := range held {
						reg[name] = hold{tag, dl}
					}
					mu.Unlock()
				case 3, 4:
					if len(held) == 0 || len(back) > 0 {
						continue
					}
					m := 1 + rand.IntN(len(held))
					back = slices.Clone(held[len(held)-m:])
					held = held[:len(held)-m]
					left := map[string]bool{}
					for _, name := range held {
						left[placeKey(name)] = true
					}
					seen := map[string]bool{}
					for _, name := range back {
						if k := placeKey(name); !left[k] && !seen[k] {
							gone = append(gone, k)
							seen[k] = true
						}
					}
					mu.Lock()
					for _, name := range back {
						delete(reg, name) // free from now on (if the free fails, held to until: no false alarm)
					}
					mu.Unlock()
					if rand.IntN(2) == 0 {
						continue // with the next take
					}
					err := q.giveBackPlaces(ctx, back, tag, until, gone, now, n)
					back, gone = nil, nil
					mu.Lock()
					if err != nil {
						errs["give "+pgCode(err)]++
					} else {
						gives.Add(1)
					}
					mu.Unlock()
				case 5:
					if rand.IntN(2) == 0 {
						sql, args := q.keyDropSQL(now, n)
						if _, err := q.pool.Exec(ctx, sql, args...); err != nil {
							mu.Lock()
							errs["drop "+pgCode(err)]++
							mu.Unlock()
						}
					} else {
						k := keys[rand.IntN(len(keys))]
						if rand.IntN(2) == 0 {
							_, _ = q.pool.Exec(ctx, "DELETE FROM "+q.table+" WHERE partition_key = $1", k)
						} else {
							_ = q.PublishBatch(ctx, make([]struct{}, 2), &PublishOpts{Partition: k})
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("takes %d, give-backs %d, errors %v", takes.Load(), gives.Load(), errs)
	if len(errs) > 0 {
		t.Errorf("errors: %v", errs)
	}
}

// A take goes in walk order whether a key's places have rows or not: with a free
// place row for the ninth key only, a take of one place from the first key takes
// the first key's (made), not the ninth's. Before, Postgres took the existing
// place first and moved the cursor past the eight keys before it, which then
// lost their turn in that round.
func TestPlacesTakeInWalkOrder(t *testing.T) {
	eachPropDB(t, func(t *testing.T, q *Queue[struct{}]) {
		name := q.dialect.String()
		ctx := context.Background()
		keys := placesFill(t, q, 10, 1)
		now := trunc(time.Now().Add(time.Hour))
		// key k0008 has a free place row (given back earlier); the others none.
		if _, err := q.db().exec(ctx, "INSERT INTO "+q.limitsTable()+" (name, window_start, starts) VALUES ('p 0 k0008', 0, 0)"); err != nil {
			t.Fatal(err)
		}
		cur := keyCursor{key: "", set: true} // the walk starts at k0000
		_, got, _, _, err := q.keyTake(ctx, &cur, nil, nil, nil, 7, time.Time{}, now.Add(time.Minute), now, 1, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: got %v, cursor now %q (keys %v)", name, got, cur.key, keys)
		if len(got) != 1 || got[0] != "p 0 k0000" {
			t.Errorf("%s: took %v, not the first key's place; keys k0000..k0007 lose their turn (cursor %q)", name, got, cur.key)
		}
	})
}

// A lane that holds every key's places and asks for one more (7 keys of
// PerPartition 1, each with ready rows) backs off after its walks have gone round
// the keys once: a walk stops after a few ready keys, and counted as short of
// every key, such takes followed each other at once for as long as the keys had
// rows. Also when the keys' places are held by another lane.
func TestPlacesShortTakesBackOff(t *testing.T) {
	eachPropDB(t, func(t *testing.T, q *Queue[struct{}]) {
		ctx := context.Background()
		placesFill(t, q, 7, 5)
		now := time.Now().Add(time.Hour)
		dl := now.Add(time.Minute)
		for _, other := range []bool{false, true} {
			var ks keySlots
			var cur keyCursor
			var held []string
			var until time.Time
			tag := int64(1)
			if other {
				// Another lane holds every place; this one holds none.
				if _, err := q.db().exec(ctx, "UPDATE "+q.limitsTable()+" SET window_start = 99, starts = "+fmt.Sprint(dl.UnixMicro())+" WHERE name LIKE 'p %'"); err != nil {
					t.Fatal(err)
				}
				tag, held, until = 2, nil, time.Time{}
			} else {
				kept, got, _, _, err := q.keyTake(ctx, &cur, nil, nil, nil, tag, time.Time{}, dl, now, 7, 1, 1)
				if err != nil || len(kept)+len(got) != 7 {
					t.Fatalf("the first take got %v %v, %v: want the 7 keys' places", kept, got, err)
				}
				held, until = got, dl
			}
			takes := 0
			for {
				takes++
				if takes > 20 {
					t.Fatalf("other lane %v: still taking at once after %d takes that got nothing", other, takes-1)
				}
				prev := cur
				ks.cursor = cur
				kept, got, more, _, err := q.keyTake(ctx, &cur, held, nil, nil, tag, until, dl, now, 1, 1, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) > 0 {
					t.Fatalf("other lane %v: took %v, held already", other, got)
				}
				held, until = kept, dl
				ks.cursor = cur
				if !ks.goOn(prev, more, true) {
					break
				}
			}
			t.Logf("other lane %v: backed off after %d takes", other, takes)
		}
	})
}

// A take of places that rides with a claim (pgAckClaimSQL with keyClaim.take)
// claims rows of the keys of the places held after it only: of a place kept, up
// to per rows less the lane's rows of its key; of each place taken, per rows;
// none of a key whose place the lane held but lost (its lease ended and another
// lane took it), nor of keys it walked past without a place.
func TestPlacesTakeRidesWithClaim(t *testing.T) {
	q := placesPG(t)
	ctx := context.Background()
	placesFill(t, q, 6, 5)
	now := trunc(time.Now())
	until := now.Add(time.Minute)
	const tag, n, per = 1, 1, 3
	cur := keyCursor{key: "k0005", set: true} // the walk starts at k0000
	kept, got, _, _, err := q.keyTake(ctx, &cur, nil, nil, nil, tag, time.Time{}, until, now, 2, n, 1)
	if err != nil || len(kept) != 0 || !slices.Equal(got, []string{"p 0 k0000", "p 0 k0001"}) {
		t.Fatalf("first take: kept %v got %v err %v", kept, got, err)
	}
	// k0001's place is lost: another lane holds it now.
	if _, err := q.pool.Exec(ctx, "UPDATE "+q.limitsTable()+" SET window_start = 2 WHERE name = 'p 0 k0001'"); err != nil {
		t.Fatal(err)
	}
	take := &keyTakeReq{names: got, tag: tag, until: until, deadline: until.Add(time.Minute), now: now,
		w: keyWindow(2, n), enough: keyEnough(2, n), k: 2, n: n, per: per,
		infKeys: []string{"k0000"}, infNs: []int{1}}
	take.cur = &cur.key // k0001: the walk goes on from k0002
	sql, args := q.pgAckClaimSQL(Limits{PerPartition: n}, []int64{}, []time.Time{}, now.Add(time.Minute), now, 100, &keyClaim{take: take})
	r, err := q.pool.Query(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]int{}
	for r.Next() {
		var kind int
		var id, a int64
		var payload []byte
		var m metaScan
		if err := r.Scan(q.metaDest(&m, &kind, &id, &a, &payload)...); err != nil {
			t.Fatal(err)
		}
		switch {
		case kind == 0:
			claimed[m.meta().key]++
		case kind >= 2:
			take.read(kind, m.meta().key, int(a))
		default:
			t.Fatalf("an ack in a statement without acks: kind %d", kind)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(take.kept, []string{"p 0 k0000"}) {
		t.Errorf("kept %v, want the place of k0000 only", take.kept)
	}
	slices.Sort(take.got)
	if !slices.Equal(take.got, []string{"p 0 k0002", "p 0 k0003"}) {
		t.Errorf("got %v, want the places of k0002 and k0003", take.got)
	}
	want := map[string]int{"k0000": per - 1, "k0002": per, "k0003": per}
	if fmt.Sprint(claimed) != fmt.Sprint(want) {
		t.Errorf("claimed by key %v, want %v", claimed, want)
	}
	if take.ready == 0 || len(take.walked) == 0 {
		t.Errorf("the walk was not read back: walked %v, %d ready", take.walked, take.ready)
	}
}

// A take spreads its places over the keys that have few ready rows: with
// PerPartition 2, a take of 3 places gets a place of each of the first 3 ready
// keys in walk order when each key's ready rows fill one place (3 rows, 3 a
// place), not both places of the first key and one of the second, so that the
// lane's claim takes rows of 3 keys; when they fill more (1 row a place), both
// places of the first key and one of the second. On both databases.
func TestPlacesTakeSpreadsOverKeys(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			for _, c := range []struct {
				per  int
				want []string
			}{
				{3, []string{"p 0 k0000", "p 0 k0001", "p 0 k0002"}},
				{1, []string{"p 0 k0000", "p 0 k0001", "p 1 k0000"}},
			} {
				var q *Queue[struct{}]
				if db == "sqlite" {
					q = propSQLite(t)
				} else {
					q = placesPG(t)
				}
				placesFill(t, q, 5, 3)
				now := trunc(time.Now())
				cur := keyCursor{key: "k0004", set: true} // the walk starts at k0000
				_, got, _, _, err := q.keyTake(context.Background(), &cur, nil, nil, nil, 1, time.Time{}, now.Add(time.Minute), now, 3, 2, c.per)
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(got)
				if !slices.Equal(got, c.want) {
					t.Fatalf("%d rows a place: got %v, want %v", c.per, got, c.want)
				}
			}
		})
	}
}

// A give-back the database refused for a passing cause is given back with the
// next, after a back-off, and let go (left to its lease) after giveTries
// refusals in a row or once its lease has ended.
func TestPlacesGiveLater(t *testing.T) {
	now := time.Now().Add(-time.Hour) // every back-off below is over
	ks := newKeySlots(new(atomic.Int64))
	ks.until = now.Add(2 * time.Hour)
	for i := range giveTries {
		if !ks.giveLater([]string{"p 0 a"}, []string{"a"}, now) {
			t.Fatalf("refusal %d: let go, want kept for the next give-back", i+1)
		}
		if !ks.dropDue() || !ks.dropLater["a"] {
			t.Fatalf("refusal %d: the next give-back is not due (backLater %v, dropLater %v)", i+1, ks.backLater, ks.dropLater)
		}
		ks.backLater = nil // taken by the next give-back, refused again
	}
	if ks.giveLater([]string{"p 0 a"}, nil, now) {
		t.Fatalf("refusal %d kept: want let go after %d", giveTries+1, giveTries)
	}
	ks.giveFails = 0
	if ks.giveLater([]string{"p 0 a"}, nil, ks.until) {
		t.Fatal("kept after the lease ended")
	}
	ks.giveFails = 0
	clear(ks.dropLater)
	if !ks.giveLater([]string{"p 0 b"}, nil, time.Now()) || ks.dropDue() && time.Now().Before(ks.giveAt) {
		t.Fatal("due before its back-off")
	}
}

// Runs of takes that get nothing back off more and more: a lane whose walks
// stop before going round (more) but find every place held takes at once while
// a run of such takes goes round, and the back-off between runs doubles, up to
// the poll, instead of falling back to slotRetry after each run.
func TestPlacesEmptyTakesBackOffMore(t *testing.T) {
	ks := newKeySlots(new(atomic.Int64))
	now := time.Now()
	keys := []string{"a", "b", "c", "d"}
	at := 0
	var backoffs []time.Duration
	for range 40 {
		prev := ks.cursor
		ks.cursor = keyCursor{key: keys[(at+1)%len(keys)], set: true} // each walk goes two keys on
		at += 2
		ks.nextTake(prev, true, 0, 8, now, time.Second)
		if ks.retryAt.After(now) {
			backoffs = append(backoffs, ks.backoff)
		}
	}
	if len(backoffs) < 5 {
		t.Fatalf("backed off %d times in 40 empty takes: %v", len(backoffs), backoffs)
	}
	for i := 1; i < len(backoffs); i++ {
		if backoffs[i] < backoffs[i-1] || backoffs[i] == backoffs[i-1] && backoffs[i] < time.Second {
			t.Fatalf("back-offs between runs of empty takes %v: want each longer than the last, up to the poll", backoffs)
		}
	}
	// A take that gets all it asked for starts afresh.
	ks.nextTake(ks.cursor, false, 8, 8, now, time.Second)
	if ks.backoff != 0 || ks.retryAt.After(now) {
		t.Fatalf("back-off %v after a take that got all its places, want none", ks.backoff)
	}
}
