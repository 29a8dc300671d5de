// Package faultproxy is a loopback RESP proxy for tests: it stands between a go-redis client
// and a real Redis and, command by command, forwards, answers with an error line of its own, or
// forwards and then drops the connection before the reply (the command ran, its reply is
// lost); it can also stop accepting connections (later dials are refused) and accept again
// on the same address.
package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Action is what the proxy does with one command.
type Action struct {
	// Reply, when set, is sent to the client as an error line ("-" + Reply) instead of
	// forwarding the command.
	Reply string
	// Cut forwards the command, waits for Redis's reply, then closes the client's connection
	// without it.
	Cut bool
	// Refuse closes the listener after this command: later dials are refused until Accept.
	Refuse bool
}

// Proxy is a running proxy; Addr is the address to give the client.
type Proxy struct {
	t        testing.TB
	upstream string
	decide   func(args []string) Action

	mu    sync.Mutex
	addr  string
	ln    net.Listener
	conns map[net.Conn]struct{}
}

// Start listens on a loopback port and forwards to upstream (a loopback Redis), asking decide
// about every command (its arguments, as strings); a nil decide forwards everything. It stops
// when the test ends.
func Start(t testing.TB, upstream string, decide func(args []string) Action) *Proxy {
	t.Helper()
	if decide == nil {
		decide = func([]string) Action { return Action{} }
	}
	p := &Proxy{t: t, upstream: upstream, decide: decide, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.addr }

// Refuse closes the listener: later dials are refused until Accept. Open connections stay.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
}

// Accept listens again on the same address.
func (p *Proxy) Accept() error {
	p.mu.Lock()
	if p.ln != nil {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.Refuse()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	p.track(client, true)
	defer p.track(client, false)
	defer client.Close()
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	crd, urd := bufio.NewReader(client), bufio.NewReader(up)
	for {
		raw, args, err := readCommand(crd)
		if err != nil {
			return
		}
		act := p.decide(args)
		if act.Refuse {
			p.Refuse()
		}
		if act.Reply != "" {
			if _, err := io.WriteString(client, "-"+act.Reply+"\r\n"); err != nil {
				return
			}
			continue
		}
		if _, err := up.Write(raw); err != nil {
			return
		}
		reply, err := readReply(urd)
		if err != nil {
			return
		}
		if act.Cut {
			return
		}
		if _, err := client.Write(reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings (a client's command), returning its bytes
// and its arguments.
func readCommand(rd *bufio.Reader) ([]byte, []string, error) {
	head, err := rd.ReadString('\n')
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasPrefix(head, "*") {
		return nil, nil, fmt.Errorf("faultproxy: not a command: %q", head)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return nil, nil, fmt.Errorf("faultproxy: bad command head %q", head)
	}
	raw := []byte(head)
	args := make([]string, 0, n)
	for range n {
		size, err := rd.ReadString('\n')
		if err != nil {
			return nil, nil, err
		}
		m, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(size, "$")))
		if err != nil || m < 0 || m > 512<<20 {
			return nil, nil, fmt.Errorf("faultproxy: bad bulk head %q", size)
		}
		b := make([]byte, m+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, size...), b...)
		args = append(args, string(b[:m]))
	}
	return raw, args, nil
}

// readReply reads one RESP2 or RESP3 reply, returning its bytes.
func readReply(rd *bufio.Reader) ([]byte, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, errors.New("faultproxy: short reply line")
	}
	out := []byte(line)
	body := strings.TrimSpace(line[1:])
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return out, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return out, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		return append(out, b...), nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			e, err := readReply(rd)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		if line[0] == '|' { // an attribute precedes the reply it describes
			e, err := readReply(rd)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("faultproxy: unknown reply type %q", line[0])
}
