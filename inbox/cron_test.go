package inbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gotp/gotp/inbox"
)

func TestCronNext(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse("2006-01-02 15:04 Mon", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		expr, from, want string
	}{
		{"* * * * *", "2026-03-04 10:00 Wed", "2026-03-04 10:01 Wed"},
		{"*/15 * * * *", "2026-03-04 10:07 Wed", "2026-03-04 10:15 Wed"},
		{"5 * * * *", "2026-03-04 10:05 Wed", "2026-03-04 11:05 Wed"},
		{"0 3 * * *", "2026-03-04 03:00 Wed", "2026-03-05 03:00 Thu"},
		{"30 9 * * MON-FRI", "2026-03-06 10:00 Fri", "2026-03-09 09:30 Mon"},
		{"0 0 1 * *", "2026-12-15 00:00 Tue", "2027-01-01 00:00 Fri"},
		{"0 0 29 2 *", "2026-03-01 00:00 Sun", "2028-02-29 00:00 Tue"},
		{"0 12 1 * 0", "2026-03-02 00:00 Mon", "2026-03-08 12:00 Sun"}, // day of month OR day of week
		{"0 12 * * 7", "2026-03-02 00:00 Mon", "2026-03-08 12:00 Sun"}, // 7 is Sunday
		{"10-20/5 1,2 * jan,Feb *", "2026-01-01 01:20 Thu", "2026-01-01 02:10 Thu"},
		{"@hourly", "2026-03-04 10:30 Wed", "2026-03-04 11:00 Wed"},
		{"@weekly", "2026-03-04 10:30 Wed", "2026-03-08 00:00 Sun"},
		{"5/20 * * * *", "2026-03-04 10:26 Wed", "2026-03-04 10:45 Wed"},
	} {
		cr, err := inbox.ParseCron(c.expr)
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		if got := cr.Next(at(c.from)); !got.Equal(at(c.want)) {
			t.Errorf("%q after %s = %s, want %s", c.expr, c.from, got.Format("2006-01-02 15:04 Mon"), c.want)
		}
	}
}

func TestCronRefusesBadSchedules(t *testing.T) {
	for _, c := range []struct{ expr, field string }{
		{"", ""}, {"* * * *", ""}, {"* * * * * *", ""}, {"@often", ""},
		{"60 * * * *", "minute"}, {"-1 * * * *", "minute"}, {"*/0 * * * *", "minute"}, {"1-x * * * *", "minute"},
		{"* 24 * * *", "hour"}, {"* 5-3 * * *", "hour"}, {"* * 0 * *", "day of month"}, {"* * 32 * *", "day of month"},
		{"* * * 13 *", "month"}, {"* * * foo *", "month"}, {"* * * * 8", "day of week"}, {"* * * * ,", "day of week"},
		{"0 0 30 2 *", ""}, {"0 0 31 4,6,9,11 *", ""},
	} {
		_, err := inbox.ParseCron(c.expr)
		var ce *inbox.CronError
		if !errors.As(err, &ce) || ce.Field != c.field || ce.Expr != c.expr {
			t.Errorf("%q: err = %v, want a *CronError on field %q", c.expr, err, c.field)
		}
	}
}

// Whatever the text, ParseCron returns a schedule or a *CronError; a schedule's
// Next is after its argument, at a whole minute, and no minute between them
// matches (checked against a minute-by-minute scan over two days).
func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/7 3-5 1,15 * MON", "0 0 29 2 *", "@daily", "5/20 1-23/3 */2 JAN-jun 0-7", "1,2,3-9/2 * * * SAT"} {
		f.Add(s, int64(1767225600))
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		c, err := inbox.ParseCron(expr)
		if err != nil {
			var ce *inbox.CronError
			if !errors.As(err, &ce) {
				t.Fatalf("%q: %T %v", expr, err, err)
			}
			return
		}
		from := time.Unix(unix%(1<<34), 0).UTC()
		next := c.Next(from)
		if next.IsZero() {
			return
		}
		if !next.After(from) || next.Second() != 0 || next.Nanosecond() != 0 {
			t.Fatalf("%q: Next(%v) = %v", expr, from, next)
		}
		if next.Sub(from) <= 48*time.Hour {
			for m := from.Truncate(time.Minute).Add(time.Minute); m.Before(next); m = m.Add(time.Minute) {
				if got := c.Next(m.Add(-time.Minute)); got.Equal(m) {
					t.Fatalf("%q: %v fires, before Next(%v) = %v", expr, m, from, next)
				}
			}
			if again := c.Next(next.Add(-time.Minute)); !again.Equal(next) {
				t.Fatalf("%q: Next(%v) = %v, but Next a minute before it = %v", expr, from, next, again)
			}
		}
	})
}
