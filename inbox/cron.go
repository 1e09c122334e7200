package inbox

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed five-field cron schedule: minute, hour, day of month, month, day
// of week, as crontab(5) has them. It is a value; safe for concurrent use.
//
// Each field is *, a number, a range a-b, or a list of them separated by commas,
// each optionally stepped (*/15, 1-30/2); months may be named JAN..DEC and days
// SUN..SAT (0 or 7 is Sunday). As in cron, when both the day of month and the day of
// week are restricted (neither is *), a day matching either fires. @yearly
// (@annually), @monthly, @weekly, @daily (@midnight) and @hourly stand for their
// usual schedules. There are no seconds: the finest schedule is once a minute.
type Cron struct {
	expr                       string
	min, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar           bool
}

// CronError reports a schedule that does not parse, or never fires.
type CronError struct {
	Expr   string
	Field  string // "minute", "hour", "day of month", "month", "day of week", or "" for the whole
	Reason string
}

// Error describes the failure.
func (e *CronError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("inbox: cron schedule %q: %s", e.Expr, e.Reason)
	}
	return fmt.Sprintf("inbox: cron schedule %q: %s field: %s", e.Expr, e.Field, e.Reason)
}

var cronMacros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
var dayNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// maxCronLen bounds the schedule text ParseCron reads.
const maxCronLen = 1024

// ParseCron parses a five-field cron schedule, or returns a *CronError naming the
// field it refuses. A schedule that parses but never fires (0 0 30 2 *) is refused
// too.
func ParseCron(expr string) (Cron, error) {
	if len(expr) > maxCronLen {
		return Cron{}, &CronError{Expr: expr[:64] + "...", Reason: fmt.Sprintf("longer than %d bytes", maxCronLen)}
	}
	spec := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(spec)]; ok {
		spec = m
	} else if strings.HasPrefix(spec, "@") {
		return Cron{}, &CronError{Expr: expr, Reason: "unknown macro (@yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"}
	}
	f := strings.Fields(spec)
	if len(f) != 5 {
		return Cron{}, &CronError{Expr: expr, Reason: fmt.Sprintf("%d fields, want 5 (minute hour day-of-month month day-of-week)", len(f))}
	}
	c := Cron{expr: expr}
	var err error
	parse := func(dst *uint64, i int, name string, lo, hi int, names []string, namesFrom int) {
		if err != nil {
			return
		}
		var e string
		*dst, e = parseField(f[i], lo, hi, names, namesFrom)
		if e != "" {
			err = &CronError{Expr: expr, Field: name, Reason: e}
		}
	}
	parse(&c.min, 0, "minute", 0, 59, nil, 0)
	parse(&c.hour, 1, "hour", 0, 23, nil, 0)
	parse(&c.dom, 2, "day of month", 1, 31, nil, 0)
	parse(&c.month, 3, "month", 1, 12, monthNames, 1)
	parse(&c.dow, 4, "day of week", 0, 7, dayNames, 0)
	if err != nil {
		return Cron{}, err
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar = f[2] == "*" || strings.HasPrefix(f[2], "*/") && c.dom == bitRange(1, 31, 1)
	c.dowStar = f[4] == "*" || strings.HasPrefix(f[4], "*/") && c.dow == bitRange(0, 6, 1)
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Cron{}, &CronError{Expr: expr, Reason: "never fires (no such date)"}
	}
	return c, nil
}

func bitRange(lo, hi, step int) uint64 {
	var b uint64
	for i := lo; i <= hi; i += step {
		b |= 1 << i
	}
	return b
}

// parseField parses one field into a bit set of the values in [lo, hi] it matches,
// or returns why not.
func parseField(s string, lo, hi int, names []string, namesFrom int) (uint64, string) {
	var set uint64
	for part := range strings.SplitSeq(s, ",") {
		if part == "" {
			return 0, "empty list item"
		}
		rng, stepText, stepped := strings.Cut(part, "/")
		step := 1
		if stepped {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > hi {
				return 0, fmt.Sprintf("step %q is not a number from 1 to %d", stepText, hi)
			}
			step = n
		}
		a, b := lo, hi
		if rng != "*" {
			from, to, isRange := strings.Cut(rng, "-")
			var e string
			if a, e = cronValue(from, lo, hi, names, namesFrom); e != "" {
				return 0, e
			}
			b = a
			if isRange {
				if b, e = cronValue(to, lo, hi, names, namesFrom); e != "" {
					return 0, e
				}
				if b < a {
					return 0, fmt.Sprintf("range %q runs backwards", rng)
				}
			} else if stepped {
				b = hi // a/n: from a to the end, as cron reads it
			}
		}
		set |= bitRange(a, b, step)
	}
	return set, ""
}

func cronValue(s string, lo, hi int, names []string, namesFrom int) (int, string) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return i + namesFrom, ""
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi || strings.HasPrefix(s, "+") {
		return 0, fmt.Sprintf("%q is not a value from %d to %d", s, lo, hi)
	}
	return n, ""
}

// String returns the schedule as it was parsed.
func (c Cron) String() string { return c.expr }

// dayMatches reports whether day t matches the day fields.
func (c Cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// Next returns the first time strictly after t at which the schedule fires, in t's
// location, at a whole minute; the zero Time if it fires in none of the next ten
// years. A wall time that a daylight-saving change skips does not fire; one it
// repeats fires at its first occurrence.
func (c Cron) Next(t time.Time) time.Time {
	if c.min == 0 {
		return time.Time{}
	}
	loc := t.Location()
	t = t.Truncate(time.Minute).Add(time.Minute)
	end := t.AddDate(10, 0, 0)
	y, mo, d := t.Date()
	h, mi := t.Hour(), t.Minute()
	for {
		day := time.Date(y, mo, d, 0, 0, 0, 0, loc)
		if day.After(end) {
			return time.Time{}
		}
		if c.month&(1<<int(mo)) == 0 {
			y, mo, d, h, mi = nextMonth(y, mo)
			continue
		}
		if !c.dayMatches(day) {
			n := day.AddDate(0, 0, 1)
			y, mo, d = n.Date()
			h, mi = 0, 0
			continue
		}
		if nh := nextBit(c.hour, h); nh < 0 {
			n := day.AddDate(0, 0, 1)
			y, mo, d = n.Date()
			h, mi = 0, 0
			continue
		} else if nh != h {
			h, mi = nh, 0
		}
		nm := nextBit(c.min, mi)
		if nm < 0 {
			h, mi = h+1, 0
			if h > 23 {
				n := day.AddDate(0, 0, 1)
				y, mo, d = n.Date()
				h = 0
			}
			continue
		}
		at := time.Date(y, mo, d, h, nm, 0, 0, loc)
		if at.Hour() != h || at.Minute() != nm {
			// The wall time does not exist that day (a daylight-saving gap).
			mi = nm + 1
			if mi > 59 {
				h, mi = h+1, 0
			}
			if h > 23 {
				n := day.AddDate(0, 0, 1)
				y, mo, d = n.Date()
				h, mi = 0, 0
			}
			continue
		}
		return at
	}
}

func nextMonth(y int, mo time.Month) (int, time.Month, int, int, int) {
	if mo == time.December {
		return y + 1, time.January, 1, 0, 0
	}
	return y, mo + 1, 1, 0, 0
}

// nextBit is the lowest set bit of b at or above i, or -1.
func nextBit(b uint64, i int) int {
	if i > 63 {
		return -1
	}
	m := b >> i << i
	if m == 0 {
		return -1
	}
	return bits.TrailingZeros64(m)
}
