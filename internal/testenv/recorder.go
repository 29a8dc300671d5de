package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// ErrorRecorder keeps the errors reported to it instead of failing the test, and passes
// everything else (Fatal included) to the real test: for a test that runs a battery against a
// planted defect and checks that the battery reports it.
type ErrorRecorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

// Error records fmt.Sprint(args...).
func (r *ErrorRecorder) Error(args ...any) { r.record(fmt.Sprint(args...)) }

// Errorf records fmt.Sprintf(format, args...).
func (r *ErrorRecorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }

func (r *ErrorRecorder) record(s string) {
	r.TB.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, s)
	r.TB.Log("reported: " + s)
}

// Reported reports whether an error containing substr was recorded.
func (r *ErrorRecorder) Reported(substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errors {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

// Errors returns the recorded errors.
func (r *ErrorRecorder) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errors...)
}
