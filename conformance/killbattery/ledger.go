package killbattery

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The ledger is a file outside every consumer process. Each handler call appends one line when
// it starts and one when it returns, before it returns, so what a call did is on disk before
// the broker can hear of it: a SIGKILL loses no line (the kernel keeps a write once it
// returned), and a call with no end line is one the kill interrupted. Each line is one write
// to a file opened with O_APPEND, so lines of concurrent calls and of successive processes
// never mix. The lines:
//
//	C <uuid> <attempt> <pid>            the handler was called
//	D <uuid> <attempt> <pid> <outcome>  it returned success, retry or malformed

// outcome is what a handler call returned.
type outcome string

const (
	interrupted      outcome = "" // no end line: the kill came first
	outcomeSuccess   outcome = "success"
	outcomeRetry     outcome = "retry"
	outcomeMalformed outcome = "malformed"
)

// ledgerWriter appends a child's lines.
type ledgerWriter struct {
	f   *os.File
	pid int
}

func openLedger(path string) (*ledgerWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("killbattery: open ledger: %w", err)
	}
	return &ledgerWriter{f: f, pid: os.Getpid()}, nil
}

func (l *ledgerWriter) called(uuid string, attempt int) error {
	return l.write(fmt.Sprintf("C %s %d %d\n", uuid, attempt, l.pid))
}

func (l *ledgerWriter) returned(uuid string, attempt int, o outcome) error {
	return l.write(fmt.Sprintf("D %s %d %d %s\n", uuid, attempt, l.pid, o))
}

func (l *ledgerWriter) write(line string) error {
	if _, err := l.f.WriteString(line); err != nil {
		return fmt.Errorf("killbattery: write ledger: %w", err)
	}
	return nil
}

func (l *ledgerWriter) close() error { return l.f.Close() }

// call is one handler call as the ledger records it.
type call struct {
	uuid    string
	attempt int
	pid     int
	outcome outcome
}

// parseLedger returns the calls in the order they started. An end line closes the latest open
// call of the same message, attempt and process. A last line without its newline is ignored
// (it cannot happen with one write per line, but a torn line must not be read as a call).
func parseLedger(data []byte) ([]call, error) {
	if i := bytes.LastIndexByte(data, '\n'); i < len(data)-1 {
		data = data[:i+1]
	}
	type key struct {
		uuid         string
		attempt, pid int
	}
	var calls []call
	open := map[key][]int{}
	for n, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		bad := func(why string) error {
			return fmt.Errorf("killbattery: ledger line %d %q: %s", n+1, line, why)
		}
		if len(f) < 4 {
			return nil, bad("too few fields")
		}
		attempt, err1 := strconv.Atoi(f[2])
		pid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return nil, bad("attempt and pid must be integers")
		}
		k := key{f[1], attempt, pid}
		switch {
		case f[0] == "C" && len(f) == 4:
			open[k] = append(open[k], len(calls))
			calls = append(calls, call{uuid: f[1], attempt: attempt, pid: pid})
		case f[0] == "D" && len(f) == 5:
			idx := open[k]
			if len(idx) == 0 {
				return nil, bad("end of a call that never started")
			}
			calls[idx[len(idx)-1]].outcome = outcome(f[4])
			open[k] = idx[:len(idx)-1]
		default:
			return nil, bad("unknown line")
		}
	}
	return calls, nil
}

// ledgerTail counts the calls started so far, reading only what was appended since the last
// look: the parent polls it every few milliseconds to kill a child after its k-th call.
type ledgerTail struct {
	f       *os.File
	partial []byte
	calls   int
}

func tailLedger(path string) (*ledgerTail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("killbattery: open ledger: %w", err)
	}
	return &ledgerTail{f: f}, nil
}

// started returns the number of calls started so far.
func (t *ledgerTail) started() (int, error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := t.f.Read(buf)
		data := append(t.partial, buf[:n]...)
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			if bytes.HasPrefix(data, []byte("C ")) {
				t.calls++
			}
			data = data[i+1:]
		}
		t.partial = append(t.partial[:0], data...)
		if err == io.EOF || n == 0 {
			return t.calls, nil
		}
		if err != nil {
			return t.calls, fmt.Errorf("killbattery: read ledger: %w", err)
		}
	}
}

func (t *ledgerTail) close() error { return t.f.Close() }
