//go:build !race

package gotp_test

// raceEnabled reports whether the tests run with -race, so that the
// documentation's programs are built the same way.
const raceEnabled = false
