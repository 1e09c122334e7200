//go:build !race

package cluster

// raceEnabled: the race detector is on (see rawRead).
const raceEnabled = false
