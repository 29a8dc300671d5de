package redisguard

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestRefusalSaysWhetherSent: a condemned connection refuses with ErrNotSent (and io.EOF, for
// go-redis's own retries) only when nothing of the request was written; part-way through one,
// with io.EOF alone.
func TestRefusalSaysWhetherSent(t *testing.T) {
	newConn := func() *guardedConn {
		a, b := net.Pipe()
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		go func() { _, _ = io.Copy(io.Discard, b) }()
		p := &path{conns: map[*guardedConn]struct{}{}}
		c := &guardedConn{Conn: a, path: p}
		c.heard.Store(sinceEpoch())
		return c
	}

	c := newConn()
	c.path.silentAt.Store(sinceEpoch() + 1)
	if err := c.SetWriteDeadline(time.Time{}); !errors.Is(err, ErrNotSent) || !errors.Is(err, io.EOF) {
		t.Errorf("SetWriteDeadline on a silent path: %v; want ErrNotSent wrapping io.EOF", err)
	}
	if _, err := c.Write([]byte("*1\r\n")); !errors.Is(err, ErrNotSent) {
		t.Errorf("first Write on a condemned connection: %v; want ErrNotSent", err)
	}

	c = newConn()
	if _, err := c.Write([]byte("*3\r\n")); err != nil {
		t.Fatal(err)
	}
	c.path.silentAt.Store(sinceEpoch() + 1)
	_, err := c.Write([]byte("$3\r\nset\r\n"))
	if errors.Is(err, ErrNotSent) || !errors.Is(err, io.EOF) {
		t.Errorf("Write part-way through a request: %v; want io.EOF, not ErrNotSent", err)
	}
}
