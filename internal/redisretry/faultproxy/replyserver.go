package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
)

// ReplyServer starts a loopback RESP server that answers every command with one fixed error
// line ("-" + line), so that go-redis parses it exactly as it parses a server's reply, and
// returns its address. It stands in for the replies a test cannot make a real server give on
// demand (LOADING, TRYAGAIN, ASK, ...). It stops when the test ends.
func ReplyServer(t testing.TB, line string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				rd := bufio.NewReader(conn)
				for {
					if _, _, err := readCommand(rd); err != nil {
						return
					}
					if _, err := io.WriteString(conn, "-"+line+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// ClosedPort returns a loopback address nothing listens on.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
