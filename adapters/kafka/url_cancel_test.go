package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/internal/clitest"
)

// silentListener listens on loopback, accepts every connection and never answers: a broker
// that hangs. accepted is signalled (without blocking) at each connection. Everything is
// closed with t.
func silentListener(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 1)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close() // Sarama's abandoned NewClient then fails at once
		}
	})
	return ln.Addr().String(), ch
}

// TestURLOpenContextEnds: Open and OpenAdapter return when their context ends, with an error
// naming the URL and wrapping context.Canceled, though the broker accepts the connection and
// never answers (Sarama's NewClient takes no context).
func TestURLOpenContextEnds(t *testing.T) {
	addr, _ := silentListener(t)
	raw := "kafka://" + addr
	for _, c := range []struct {
		name string
		open func(context.Context) error
	}{
		{"Open", func(ctx context.Context) error {
			b, err := brokerurl.OpenBroker(ctx, raw, brokerurl.Options{NoConsume: true, Logger: urlTestLogger(t)})
			if err == nil {
				_ = b.Close()
			}
			return err
		}},
		{"OpenAdapter", func(ctx context.Context) error {
			a, err := brokerurl.OpenAdapter(ctx, raw+"?group=g", brokerurl.Options{Logger: urlTestLogger(t)})
			if err == nil {
				_ = a.Close()
			}
			return err
		}},
	} {
		for _, after := range []time.Duration{200 * time.Millisecond, 0} {
			t.Run(fmt.Sprintf("%s/cancelled_after_%v", c.name, after), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if after == 0 {
					cancel() // ended already: no connection at all
				}
				time.AfterFunc(after, cancel)
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- c.open(ctx) }()
				select {
				case err := <-done:
					if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "connect to "+raw) {
						t.Fatalf("%s: %v, want an error naming %s that wraps context.Canceled", c.name, err, raw)
					}
					t.Logf("%s returned after %v: %v", c.name, time.Since(start).Round(time.Millisecond), err)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s still connecting 10s after start, its context cancelled at %v", c.name, after)
				}
			})
		}
	}
}

// TestURLTimeouts: dial_timeout and read_timeout set the adapter's and the operations client's
// Sarama fields; without them the adapter keeps Sarama's and the operations client is bounded.
func TestURLTimeouts(t *testing.T) {
	cfg, x, err := parseURL(mustParse(t, "kafka://h:9092?group=g"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sarama != nil {
		t.Errorf("no parameter: Config.Sarama set (%+v), want the adapter's default", cfg.Sarama.Net)
	}
	ops := operationsConfig(cfg, x)
	if ops.Net.DialTimeout != opsDialTimeout || ops.Net.ReadTimeout != opsReadTimeout || ops.Metadata.Timeout != opsMetadataTimeout {
		t.Errorf("operations client: dial %v, read %v, metadata %v; want %v, %v, %v",
			ops.Net.DialTimeout, ops.Net.ReadTimeout, ops.Metadata.Timeout, opsDialTimeout, opsReadTimeout, opsMetadataTimeout)
	}
	if ops.Net.ReadTimeout <= ops.Producer.Timeout {
		t.Errorf("operations read timeout %v is not above Producer.Timeout %v: an acks=all replay may time out", ops.Net.ReadTimeout, ops.Producer.Timeout)
	}

	cfg, x, err = parseURL(mustParse(t, "kafka://h:9092?group=g&dial_timeout=3s&read_timeout=1m"), brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sarama == nil || cfg.Sarama.Net.DialTimeout != 3*time.Second || cfg.Sarama.Net.ReadTimeout != time.Minute {
		t.Fatalf("adapter configuration: %+v, want dial 3s, read 1m", cfg.Sarama)
	}
	if ops := operationsConfig(cfg, x); ops.Net.DialTimeout != 3*time.Second || ops.Net.ReadTimeout != time.Minute {
		t.Errorf("operations client: dial %v, read %v; want the URL's 3s, 1m", ops.Net.DialTimeout, ops.Net.ReadTimeout)
	}

	for _, c := range []struct{ q, param string }{
		{"dial_timeout=0s", "dial_timeout"},
		{"dial_timeout=", "dial_timeout"},
		{"read_timeout=banana", "read_timeout"},
		{"read_timeout=-1s", "read_timeout"},
	} {
		_, err := configFromURL(mustParse(t, "kafka://h:9092?group=g&"+c.q), brokerurl.Options{})
		if pe, ok := errors.AsType[*brokerurl.ParameterError](err); !ok || pe.Name != c.param {
			t.Errorf("%s: %v, want a ParameterError naming %s", c.q, err, c.param)
		}
	}
}

// TestURLCLIInterrupt: Ctrl-C ends `millrace dlq list` on a Kafka address that accepts the
// connection and never answers: one line, exit 1, within seconds (it ran 180 s).
func TestURLCLIInterrupt(t *testing.T) {
	addr, accepted := silentListener(t)
	cmd := exec.Command(clitest.Binary(t), "dlq", "list", "--store", "kafka://"+addr, "--topic", "x")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-accepted: // connecting: past the signal setup
	case err := <-done:
		t.Fatalf("millrace exited before connecting: %v, stderr %q", err, stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("millrace did not connect within 30s")
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !clitest.OneLine(stderr.String()) || !strings.Contains(stderr.String(), "context canceled") {
			t.Fatalf("after Ctrl-C: %v, stderr %q; want exit 1 and one line saying the context was cancelled", err, stderr.String())
		}
		t.Logf("exited %v after Ctrl-C: %s", time.Since(start).Round(time.Millisecond), stderr.String())
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("millrace still running 10s after Ctrl-C; stderr %q", stderr.String())
	}
}

// TestURLCLISecondInterrupt: a second Ctrl-C ends the command when the first could not (here
// `plan --spec -` blocked reading a standard input that never ends, which no context stops):
// the process dies of the signal. (It tests cmd/millrace/main.go, from here because the built
// command and its test helpers are at hand.)
func TestURLCLISecondInterrupt(t *testing.T) {
	cmd := exec.Command(clitest.Binary(t), "plan", "--spec", "-", "kafka://127.0.0.1:1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Signal only once it reads stdin (past signal.NotifyContext): a thread of it waits in a
	// pipe read. Without /proc, a few seconds of start-up do.
	deadline := time.Now().Add(10 * time.Second)
	for !readingPipe(cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 2 {
		select {
		case err := <-done:
			t.Fatalf("millrace exited after %d Ctrl-C: %v, want it blocked until the second", i, err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !errors.As(err, &exit) || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Fatalf("after two Ctrl-C: %v, want the process killed by SIGINT", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("millrace still running 10s after the second Ctrl-C")
	}
}

// readingPipe reports whether a thread of process pid waits in a pipe read (Linux /proc).
func readingPipe(pid int) bool {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "wchan"))
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "pipe_read") {
			return true
		}
	}
	return false
}
