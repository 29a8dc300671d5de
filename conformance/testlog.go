package conformance

import (
	"io"
	"sync"
	"testing"
)

// testOutput returns a writer to t.Output() that drops what is written once t has ended: a
// goroutine of an adapter or of Watermill may log after the router's Close returned (a timer,
// a subscriber winding down), and a write to a finished test's output panics the whole test
// binary ("Write called after ... has completed").
func testOutput(t testing.TB) io.Writer {
	w := &endingWriter{out: t.Output()}
	t.Cleanup(w.end) // registered before the router's cleanup, so it runs after it
	return w
}

type endingWriter struct {
	mu    sync.Mutex
	out   io.Writer
	ended bool
}

func (w *endingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *endingWriter) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}
