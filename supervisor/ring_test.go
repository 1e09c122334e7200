package supervisor

import (
	"testing"

	"pgregory.net/rapid"
)

// TestRestartRingMatchesModel checks the ring against OTP's rule written
// naively: keep every restart time, and a restart is allowed when, with
// it, at most max restarts fall within the last period. The ring must keep
// only the restarts of the window, in a buffer no larger than max.
func TestRestartRingMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		max := rapid.IntRange(0, 6).Draw(t, "max")
		period := rapid.Int64Range(1, 50).Draw(t, "period")
		steps := rapid.SliceOfN(rapid.Int64Range(0, 30), 1, 200).Draw(t, "steps")
		var r restartRing
		var model []int64 // times of allowed restarts
		now := int64(0)
		for i, d := range steps {
			now += d
			within := 1 // this restart
			for _, at := range model {
				if now-at < period {
					within++
				}
			}
			want := within <= max
			if got := r.add(now, max, period); got != want {
				t.Fatalf("step %d at %d: ring says %v, model %v (max %d period %d, history %v)", i, now, got, want, max, period, model)
			}
			if !want {
				return // the supervisor gives up: no later restarts
			}
			model = append(model, now)
			if r.n != within || len(r.buf) > max {
				t.Fatalf("step %d: ring keeps %d entries in a buffer of %d; %d are in the window, intensity %d", i, r.n, len(r.buf), within, max)
			}
		}
	})
}
