// Package clitest runs the millrace command as an operator does, for end-to-end tests that
// live beside the code they exercise (each adapter's folder) and so cannot import the main
// package: it builds ./cmd/millrace once per test process and runs it with arguments, standard
// input and environment, returning the exit code, standard output and standard error.
//
// A test package that uses it calls Main from its TestMain, which removes the built binary
// when the tests end:
//
//	func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }
//
// The binary is built with -race when the tests run with -race (about one to three seconds
// more per test process, and each run of the command a few milliseconds more).
package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Package is the import path of the command the tests run.
const Package = "github.com/millrace/millrace/cmd/millrace"

// RunTimeout bounds one run of the command; a run that takes longer is killed and fails the test.
const RunTimeout = 2 * time.Minute

// The one build of this test process, made by the first Binary call and removed by Main.
var (
	inMain    atomic.Bool
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// Main runs the tests of m and then removes the binary Binary built, if any. It returns the
// exit code for os.Exit.
func Main(m *testing.M) int {
	inMain.Store(true)
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	return code
}

// Binary returns the path of the millrace command built for this test process: built on the
// first call (go build, with -race when the tests run with it, into a temporary directory that
// Main removes), reused afterwards. A failed build fails every test that asks for it, with the
// compiler's output.
func Binary(tb testing.TB) string {
	tb.Helper()
	if !inMain.Load() {
		tb.Fatal("clitest: call clitest.Main from the package's TestMain (func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }), which removes the built command at the end")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "millrace-clitest-")
		if buildErr != nil {
			return
		}
		path := filepath.Join(buildDir, "millrace")
		args := []string{"build", "-buildvcs=false", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, Package)
		start := time.Now()
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = errors.New("go " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out))
			return
		}
		buildPath = path
		tb.Logf("clitest: built %s in %v (race %v)", Package, time.Since(start).Round(time.Millisecond), raceEnabled)
	})
	if buildErr != nil {
		tb.Fatalf("clitest: build the millrace command: %v", buildErr)
	}
	return buildPath
}

// Result is what one run of the command gave.
type Result struct {
	// Code is the exit status.
	Code int
	// Stdout and Stderr are everything the command wrote to each.
	Stdout, Stderr string
}

// CLI runs the command for one test with a fixed environment.
type CLI struct {
	tb  testing.TB
	env []string
}

// New returns a CLI for tb. The command sees the test process's environment without any
// MILLRACE_* variable (the tests' own settings must not leak into it), plus env, each
// "NAME=value".
func New(tb testing.TB, env ...string) *CLI {
	tb.Helper()
	for _, kv := range env {
		if !strings.Contains(kv, "=") {
			tb.Fatalf("clitest.New: env %q: must be NAME=value", kv)
		}
	}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MILLRACE_") {
			base = append(base, kv)
		}
	}
	return &CLI{tb: tb, env: append(base, env...)}
}

// Run runs the command with args and stdin and returns what it gave. The test fails if the
// command cannot start or runs longer than RunTimeout.
func (c *CLI) Run(stdin string, args ...string) Result {
	c.tb.Helper()
	bin := Binary(c.tb)
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		c.tb.Fatalf("millrace %s: still running after %v (killed); stdout %q, stderr %q", strings.Join(args, " "), RunTimeout, r.Stdout, r.Stderr)
	case errors.As(err, &exit) && exit.Exited():
		r.Code = exit.ExitCode()
	case err != nil:
		c.tb.Fatalf("millrace %s: %v; stdout %q, stderr %q", strings.Join(args, " "), err, r.Stdout, r.Stderr)
	}
	return r
}

// OK runs args with no input and fails the test unless the command exits 0; it returns the
// standard output.
func (c *CLI) OK(args ...string) string {
	c.tb.Helper()
	r := c.Run("", args...)
	if r.Code != 0 {
		c.tb.Fatalf("millrace %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// List is the output of `millrace dlq list --json`.
type List struct {
	Total   int64   `json:"total"`
	Next    string  `json:"next"`
	Entries []Entry `json:"entries"`
}

// Entry is one dead letter as `dlq list --json` and `dlq show --json` print it. Each field is
// the JSON key of its tag (cmd/millrace/format.go); Payload and PayloadText are in show only.
type Entry struct {
	ID            string            `json:"id"`
	UUID          string            `json:"uuid"`
	Reason        string            `json:"reason"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"last_error"`
	OriginalTopic string            `json:"original_topic"`
	OriginalKey   string            `json:"original_key"`
	Broker        string            `json:"broker"`
	NativeID      string            `json:"native_id"`
	Handler       string            `json:"handler"`
	Metadata      map[string]string `json:"metadata"`
	PayloadSize   int               `json:"payload_size"`
	Payload       []byte            `json:"payload"`
	PayloadText   *string           `json:"payload_text"`
	Native        []Field           `json:"native"`
	ErrorTypes    []string          `json:"error_types"`
	PanicStack    string            `json:"panic_stack"`
}

// Field is one native field of an Entry (a Redis stream field, a Kafka header, an AMQP header
// or property, an SQS attribute), in broker order. Each field is the JSON key of its tag.
type Field struct {
	Name       string  `json:"name"`
	NameBase64 []byte  `json:"name_base64"`
	Type       string  `json:"type"`
	Value      []byte  `json:"value"`
	ValueText  *string `json:"value_text"`
}

// ListJSON runs `dlq list --json args...`, fails the test unless it exits 0 with JSON, and
// returns the list.
func (c *CLI) ListJSON(args ...string) List {
	c.tb.Helper()
	var out List
	s := c.OK(append([]string{"dlq", "list", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		c.tb.Fatalf("dlq list --json: the output is not a list: %v\n%s", err, s)
	}
	return out
}

// ShowJSON runs `dlq show ID --json args...` and returns the entry.
func (c *CLI) ShowJSON(id string, args ...string) Entry {
	c.tb.Helper()
	var out Entry
	s := c.OK(append([]string{"dlq", "show", id, "--json"}, args...)...)
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		c.tb.Fatalf("dlq show --json: the output is not an entry: %v\n%s", err, s)
	}
	return out
}

// Listed runs `dlq list --json args...` and reports how many dead letters it counted, or -1
// when the command failed (a destination not created yet): for waiting until one arrives.
func (c *CLI) Listed(args ...string) int64 {
	c.tb.Helper()
	r := c.Run("", append([]string{"dlq", "list", "--json"}, args...)...)
	var out List
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &out) != nil {
		return -1
	}
	return out.Total
}

// OneLine reports whether s, trimmed, is a single line: the CLI's errors are.
func OneLine(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && !strings.Contains(s, "\n")
}
