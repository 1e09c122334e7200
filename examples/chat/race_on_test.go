//go:build race

package chat

// raceEnabled reports whether the tests run with -race, which changes
// what allocates (see TestAllocationsPerMessage).
const raceEnabled = true
