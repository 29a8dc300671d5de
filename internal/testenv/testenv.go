// Package testenv decides what an integration test does when its broker is unreachable:
// in CI (CI=true) it fails, locally it skips with a message that says how to run it.
package testenv

import (
	"os"
	"testing"
)

// InCI reports whether the tests run in CI, where every broker must be reachable.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unreachable fails the test in CI and skips it elsewhere, naming the broker, the address, the
// error and the environment variable that points the test at another broker.
func Unreachable(t testing.TB, broker, addr, envVar string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s at %s is unreachable in CI (CI=true): %v", broker, addr, err)
	}
	t.Skipf("%s at %s is unreachable (%v); start it or set %s to run this test", broker, addr, err, envVar)
}

// Getenv returns the environment variable name, or def when it is unset or empty.
func Getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
