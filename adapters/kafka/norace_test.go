//go:build !race

package kafka

// raceEnabled reports whether the tests run under the race detector, whose sync.Pool drops
// items at random (so allocation counts through a pool are not stable there).
const raceEnabled = false
