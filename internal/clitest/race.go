//go:build race

package clitest

// raceEnabled is true when the test binary runs with the race detector: the command is then
// built with -race too.
const raceEnabled = true
