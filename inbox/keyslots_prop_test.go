package inbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"
)

// placeRow is a place of Limits.PerPartition as TABLE_limits holds it: the tag
// of the lane that took it last and its lease's deadline (microseconds).
type placeRow struct{ tag, until int64 }

// propLane is a lane of the model: its tag and the places it believes it holds
// under the deadline until.
type propLane struct {
	tag    int64
	held   []string
	until  int64
	cursor keyCursor
}

// The places of Limits.PerPartition against a model, on the statements the lanes
// run (keyTake, slotFreeSQL, keyDropSQL), on SQLite and, with POSTGRES_TEST_URL,
// Postgres: three lanes take places, give some back, crash (forget what they hold,
// writing nothing), the clock moves (leases end), rows of three keys are published
// and settled, and idle keys' places are dropped, in any order. After each step
// TABLE_limits is what the model says: no key has more than PerPartition places,
// no place is believed held by two lanes under live leases, a lane's live places
// are its own in the table, a take gets as many free places of ready keys as it
// asks for and are free (it makes those that have no row), and a dropped key had no rows and no live place. At the end,
// once every lease has ended, a fresh lane takes every place of the ready keys:
// none leaked.
func TestPlacesModel(t *testing.T) {
	eachPropDB(t, func(t *testing.T, q *Queue[struct{}]) {
		rapid.Check(t, func(rt *rapid.T) { placesModel(rt, q) })
	})
}

// eachPropDB runs f as a subtest on a queue of propSQLite and, with
// POSTGRES_TEST_URL, of propPostgres.
func eachPropDB(t *testing.T, f func(t *testing.T, q *Queue[struct{}])) {
	dbs := map[string]func(t *testing.T) *Queue[struct{}]{"sqlite": propSQLite}
	if url := os.Getenv("POSTGRES_TEST_URL"); url != "" {
		dbs["postgres"] = func(t *testing.T) *Queue[struct{}] { return propPostgres(t, url) }
	}
	for _, name := range slices.Sorted(maps.Keys(dbs)) {
		t.Run(name, func(t *testing.T) { f(t, dbs[name](t)) })
	}
}

var propSeq atomic.Int64

func propColumns() Columns {
	c := GroupColumns()
	c.Group = ""
	return c
}

func propSQLite(t *testing.T) *Queue[struct{}] {
	db, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "places.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q, err := NewSQLite(db, Config[struct{}]{Table: "places", Columns: propColumns()})
	if err != nil {
		t.Fatal(err)
	}
	mk, err := NewSQLite(db, Config[struct{}]{Table: "places", Columns: GroupColumns()})
	if err != nil {
		t.Fatal(err)
	}
	return propTable(t, q, mk)
}

func propPostgres(t *testing.T, url string) *Queue[struct{}] {
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := fmt.Sprintf("places_%d_%d", os.Getpid(), propSeq.Add(1))
	t.Cleanup(func() {
		for _, s := range []string{"", "_limits", "_periodic"} {
			_, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+s+`"`)
		}
	})
	q, err := NewPostgres(pool, Config[struct{}]{Table: table, Columns: propColumns()})
	if err != nil {
		t.Fatal(err)
	}
	mk, err := NewPostgres(pool, Config[struct{}]{Table: table, Columns: GroupColumns()})
	if err != nil {
		t.Fatal(err)
	}
	return propTable(t, q, mk)
}

// propTable makes q's table with mk (the default schema with groups; q maps it
// without the Group column) and its table of limits.
func propTable(t *testing.T, q, mk *Queue[struct{}]) *Queue[struct{}] {
	if err := mk.CreateTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := q.ensureSlots(t.Context(), 0, false, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	return q
}

func placesModel(rt *rapid.T, q *Queue[struct{}]) {
	ctx := context.Background()
	for _, s := range []string{"DELETE FROM " + q.table, "DELETE FROM " + q.limitsTable()} {
		if _, err := q.db().exec(ctx, s); err != nil {
			rt.Fatal(err)
		}
	}
	keys := []string{"a", "b", "c"}
	n := rapid.IntRange(1, 3).Draw(rt, "PerPartition")
	const lease = int64(time.Second / time.Microsecond)
	// The clock starts an hour ahead of the host's, so that the rows published
	// now are ready at once.
	now := time.Now().Add(time.Hour).UnixMicro()
	rows := map[string]int{}        // the model's rows of each key
	places := map[string]placeRow{} // the model's places
	lanes := make([]*propLane, 3)
	for i := range lanes {
		lanes[i] = &propLane{tag: int64(i + 1)}
	}
	nextTag := int64(len(lanes) + 1)
	at := func(us int64) time.Time { return time.UnixMicro(us) }

	check := func(op string) {
		got := map[string]placeRow{}
		r, err := q.db().query(ctx, "SELECT name, window_start, starts FROM "+q.limitsTable()+" WHERE name LIKE 'p %'")
		if err != nil {
			rt.Fatal(err)
		}
		for r.Next() {
			var name string
			var p placeRow
			if err := r.Scan(&name, &p.tag, &p.until); err != nil {
				rt.Fatal(err)
			}
			got[name] = p
		}
		r.Close()
		if err := r.Err(); err != nil {
			rt.Fatal(err)
		}
		if !maps.Equal(got, places) {
			rt.Fatalf("after %s: the table holds places %v, the model %v", op, got, places)
		}
		perKey := map[string]int{}
		for name := range got {
			perKey[placeKey(name)]++
			var i int
			var k string
			if _, err := fmt.Sscanf(name, "p %d %s", &i, &k); err != nil || i < 0 || i >= n {
				rt.Fatalf("after %s: place %q is not one of the %d of its key", op, name, n)
			}
		}
		for k, c := range perKey {
			if c > n {
				rt.Fatalf("after %s: key %s has %d places, PerPartition %d", op, k, c, n)
			}
		}
		owner := map[string]int64{}
		for _, l := range lanes {
			if l.until <= now {
				continue // its lease ended: it holds nothing it may use
			}
			for _, name := range l.held {
				if o, dup := owner[name]; dup {
					rt.Fatalf("after %s: place %s held by lanes %d and %d under live leases", op, name, o, l.tag)
				}
				owner[name] = l.tag
				if p := got[name]; p.tag != l.tag || p.until != l.until {
					rt.Fatalf("after %s: lane %d holds %s until %d, the table says lane %d until %d", op, l.tag, name, l.until, p.tag, p.until)
				}
			}
		}
	}

	// take runs a lane's take of up to k more places (k 0: an extension), per
	// rows a place (a second place of a key only for a key with more ready rows
	// than one fills), giving
	// back after it the last m places it holds (the keys of which it holds no
	// other gone, their places deleted if idle), and checks it against the model.
	take := func(l *propLane, k, m, per int) {
		deadline := now + lease
		back := slices.Clone(l.held[len(l.held)-m:])
		l.held = slices.Clone(l.held[:len(l.held)-m])
		var gone []string
		for _, name := range back {
			if key := placeKey(name); !slices.ContainsFunc(l.held, func(h string) bool { return placeKey(h) == key }) && !slices.Contains(gone, key) {
				gone = append(gone, key)
			}
		}
		until := l.until
		kept, got, _, _, err := q.keyTake(ctx, &l.cursor, l.held, back, gone, l.tag, at(until), at(deadline), at(now), k, n, per)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() {
			// The give-back, after the take: a place back that the take got
			// (its lease had ended) carries the new deadline, and stays.
			for _, name := range back {
				if p := places[name]; p.tag == l.tag && p.until == until {
					places[name] = placeRow{}
				}
			}
			live := map[string]bool{}
			for name, p := range places {
				live[placeKey(name)] = live[placeKey(name)] || p.until > now
			}
			for name := range places {
				if key := placeKey(name); slices.Contains(gone, key) && rows[key] == 0 && !live[key] {
					delete(places, name)
				}
			}
		}()
		for _, name := range kept {
			if !slices.Contains(l.held, name) {
				rt.Fatalf("lane %d kept %s, which it did not hold", l.tag, name)
			}
		}
		for _, name := range l.held {
			p := places[name]
			if want := p.tag == l.tag && p.until == l.until; want != slices.Contains(kept, name) {
				rt.Fatalf("lane %d: kept %v of %v, the model's places %v", l.tag, kept, l.held, places)
			}
		}
		// Free places of ready keys, also those that have no row, which the take
		// makes as it takes them (and makes no others): the I-th place of a key
		// (from 0) if the key has more than I times per ready rows.
		ready := places
		if k > 0 {
			ready = maps.Clone(places)
			propMake(ready, rows, n)
		}
		var free []string
		for name, p := range ready {
			var i int
			_, _ = fmt.Sscanf(name, "p %d ", &i)
			if p.until <= now && rows[placeKey(name)] > i*per && !slices.Contains(l.held, name) {
				free = append(free, name)
			}
		}
		for _, name := range got {
			if !slices.Contains(free, name) {
				rt.Fatalf("lane %d took %s, not a free place of a ready key (free: %v)", l.tag, name, free)
			}
		}
		if len(got) != min(k, len(free)) {
			rt.Fatalf("lane %d asked for %d places and got %v of the free %v", l.tag, k, got, free)
		}
		l.held = append(kept, got...)
		l.until = deadline
		for _, name := range l.held {
			places[name] = placeRow{tag: l.tag, until: deadline}
		}
	}

	// drop runs sql, which deletes idle places, and deletes from the model the
	// places of the keys only lets through that have no rows and no place held.
	drop := func(op, sql string, args []any, only func(key string) bool) {
		if _, err := q.db().exec(ctx, sql, args...); err != nil {
			rt.Fatal(err)
		}
		live := map[string]bool{}
		for name, p := range places {
			live[placeKey(name)] = live[placeKey(name)] || p.until > now
		}
		for name := range places {
			if k := placeKey(name); only(k) && rows[k] == 0 && !live[k] {
				delete(places, name)
			}
		}
		check(op)
	}

	rt.Repeat(map[string]func(*rapid.T){
		"take": func(rt *rapid.T) {
			l := rapid.SampledFrom(lanes).Draw(rt, "lane")
			take(l, rapid.IntRange(0, 4).Draw(rt, "k"), 0, rapid.IntRange(1, 3).Draw(rt, "per"))
			check("take")
		},
		"give back and take": func(rt *rapid.T) {
			l := rapid.SampledFrom(lanes).Draw(rt, "lane")
			if len(l.held) == 0 {
				rt.Skip("holds none")
			}
			take(l, rapid.IntRange(0, 4).Draw(rt, "k"), rapid.IntRange(1, len(l.held)).Draw(rt, "places"), rapid.IntRange(1, 3).Draw(rt, "per"))
			check("give back and take")
		},
		"give back": func(rt *rapid.T) {
			l := rapid.SampledFrom(lanes).Draw(rt, "lane")
			if len(l.held) == 0 {
				rt.Skip("holds none")
			}
			m := rapid.IntRange(1, len(l.held)).Draw(rt, "places")
			back := l.held[len(l.held)-m:]
			sql, args := q.slotFreeSQL(back, l.tag, at(l.until))
			if _, err := q.db().exec(ctx, sql, args...); err != nil {
				rt.Fatal(err)
			}
			for _, name := range back {
				if p := places[name]; p.tag == l.tag && p.until == l.until {
					places[name] = placeRow{}
				}
			}
			l.held = slices.Clone(l.held[:len(l.held)-m])
			check("give back")
		},
		"crash": func(rt *rapid.T) {
			l := rapid.SampledFrom(lanes).Draw(rt, "lane")
			// A new instance in its place: what the old one held comes free
			// when its lease ends.
			*l = propLane{tag: nextTag}
			nextTag++
			check("crash")
		},
		"time": func(rt *rapid.T) {
			now += rapid.Int64Range(0, 3*lease/2).Draw(rt, "µs")
			check("time")
		},
		"publish": func(rt *rapid.T) {
			k := rapid.SampledFrom(keys).Draw(rt, "key")
			if _, err := q.Publish(ctx, struct{}{}, &PublishOpts{Partition: k}); err != nil {
				rt.Fatal(err)
			}
			rows[k]++
			check("publish")
		},
		"settle": func(rt *rapid.T) {
			k := rapid.SampledFrom(keys).Draw(rt, "key")
			if rows[k] == 0 {
				rt.Skip("no rows")
			}
			id := col(q.c.ID)
			if _, err := q.db().exec(ctx, "DELETE FROM "+q.table+" WHERE "+id+" = (SELECT min("+id+") FROM "+q.table+" WHERE partition_key = '"+k+"')"); err != nil {
				rt.Fatal(err)
			}
			rows[k]--
			check("settle")
		},
		"drop": func(rt *rapid.T) {
			sql, args := q.keyDropSQL(at(now), n)
			drop("drop", sql, args, func(string) bool { return true })
		},
		"dropKeys": func(rt *rapid.T) {
			some := rapid.SliceOfDistinct(rapid.SampledFrom(keys), rapid.ID[string]).Draw(rt, "keys")
			sql, args := q.keyDropKeysSQL(some, at(now), n)
			drop("dropKeys", sql, args, func(k string) bool { return slices.Contains(some, k) })
		},
	})

	// No place leaked: once every lease has ended, a fresh lane with every key
	// ready, with rows for every place, takes every place.
	for _, k := range keys {
		for range n {
			if _, err := q.Publish(ctx, struct{}{}, &PublishOpts{Partition: k}); err != nil {
				rt.Fatal(err)
			}
			rows[k]++
		}
	}
	now += lease + 1
	fresh := &propLane{tag: nextTag}
	take(fresh, len(keys)*n, 0, 1)
	check("the last take")
	if len(fresh.held) != len(keys)*n {
		rt.Fatalf("a fresh lane took %d places of %d keys with %d each: %v", len(fresh.held), len(keys), n, fresh.held)
	}
}

// propMake adds to the model the places a take makes: PerPartition of each key
// with rows.
func propMake(places map[string]placeRow, rows map[string]int, n int) {
	for k, c := range rows {
		if c == 0 {
			continue
		}
		for i := range n {
			name := fmt.Sprintf("p %d %s", i, k)
			if _, ok := places[name]; !ok {
				places[name] = placeRow{}
			}
		}
	}
}

// The gate of a lane's slots against a model: whatever the order of handlers
// entering and leaving, resizes (slots taken, lost or extended) and idle tokens
// taken back (slots given back), a handler enters only while the handlers running
// that hold tokens are fewer than the slots held, the tokens always add up
// (free + running - owed = slots), a resize below the running handlers cancels
// them, and once every handler has left the gate holds exactly the slots it was
// given: no token leaks or is made up.
func TestSlotGateModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g := newSlotGate(new(atomic.Int64))
		slots := 0            // the model: slots held
		var running []*leased // handlers in the gate
		stop := make(chan struct{})
		close(stop) // enter never waits: a refused handler returns at once
		check := func(op string) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.free < 0 || g.owed < 0 || g.free+len(g.running)-g.owed != slots {
				rt.Fatalf("after %s: free %d, running %d, owed %d; slots %d", op, g.free, len(g.running), g.owed, slots)
			}
			if len(g.running) != len(running) {
				rt.Fatalf("after %s: the gate runs %d handlers, the model %d", op, len(g.running), len(running))
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"enter": func(rt *rapid.T) {
				g.mu.Lock()
				room := len(g.running)-g.owed < slots
				g.mu.Unlock()
				j := gateJob()
				if ok := g.enter(j, stop); ok != room {
					rt.Fatalf("enter = %v with %d running, %d owed, %d slots", ok, len(running), g.owed, slots)
				} else if ok {
					running = append(running, j)
				}
				check("enter")
			},
			"leave": func(rt *rapid.T) {
				if len(running) == 0 {
					rt.Skip("none running")
				}
				i := rapid.IntRange(0, len(running)-1).Draw(rt, "handler")
				g.leave(running[i])
				running = slices.Delete(running, i, i+1)
				check("leave")
			},
			"resize": func(rt *rapid.T) {
				n := rapid.IntRange(0, 6).Draw(rt, "slots")
				g.mu.Lock()
				inUse := len(g.running) - g.owed
				g.mu.Unlock()
				g.resize(n, errSlotModel)
				if n < inUse {
					for _, j := range running {
						if context.Cause(j.ctx) != errSlotModel {
							rt.Fatalf("resize to %d below %d in use left a handler running uncancelled", n, inUse)
						}
					}
				}
				slots = n
				check("resize")
			},
			"idle": func(rt *rapid.T) {
				k := rapid.IntRange(0, 6).Draw(rt, "k")
				g.mu.Lock()
				free := g.free
				g.mu.Unlock()
				got := g.idle(k)
				if got != min(k, free) {
					rt.Fatalf("idle(%d) = %d with %d free", k, got, free)
				}
				slots -= got
				check("idle")
			},
		})
		for _, j := range running {
			g.leave(j)
		}
		running = nil
		check("the last leave")
		if g.owed != 0 || g.free != slots {
			rt.Fatalf("every handler left: free %d, owed %d, slots %d", g.free, g.owed, slots)
		}
	})
}

var errSlotModel = errors.New("slots lost (model)")
