package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/millrace/millrace/brokerurl"
)

// app is the CLI with its dependencies made explicit, so tests run commands in-process with
// their own brokers, environment and terminal.
type app struct {
	// mux opens broker and store URLs.
	mux *brokerurl.Mux
	// getenv reads the environment.
	getenv func(string) string
	// isTerminal reports whether w is a terminal (progress bars are drawn only there).
	isTerminal func(w io.Writer) bool
	// now is the clock of relative --since/--until values.
	now func() time.Time
}

func newApp() *app {
	// The CLI owns its process: broker clients' process-wide loggers (go-redis prints every
	// failed dial) would put their lines before millrace's own one-line error.
	brokerurl.DefaultMux().SilenceClientLogs()
	return &app{mux: brokerurl.DefaultMux(), getenv: os.Getenv, isTerminal: isTerminal, now: time.Now}
}

// isTerminal reports whether w is a file on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// io is one invocation's standard streams.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

const usage = `millrace: operate millrace dead letters

Usage:
  millrace dlq list    [source] [filter] [--json] [--limit N] [--after CURSOR]
  millrace dlq show    [source] ID [--json]
  millrace dlq replay  [source] (ID... | filter | --all) (--keep-history | --reset-history)
                       [--broker URL] [--to-topic T] [--rate N] [--dry-run]
  millrace dlq purge   [source] (ID... | filter) [--yes]
  millrace dlq migrate --store postgres://...

Source (where the dead letters are):
  --store URL      postgres://... for the table store, or a broker URL for that broker's
                   dead-letter destination of --topic (env MILLRACE_STORE)
  --table NAME     table store table (env MILLRACE_TABLE, default millrace_dead_letters)
  --schema NAME    table store schema (env MILLRACE_SCHEMA, default public)
  --dlq-topic T    a broker store's destination name, when it is not the adapter's default for --topic

Filter:
  --topic T  --reason discarded|exhausted|malformed
  --since T  --until T   (RFC 3339, 2006-01-02, or a duration ago such as 90m or 24h)

Replay target:
  --broker URL     redis://, amqp://, kafka://host:port, sqs+http://host:port or
                   sqs+https://sqs.<region>.amazonaws.com (env MILLRACE_BROKER)

Exit status: 0 done, 1 failed (nothing changed unless the message says so), 2 bad usage.
`

// run executes one command line and returns the exit status. Errors are one line on stderr.
func (a *app) run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	sio := stdio{in: stdin, out: stdout, err: stderr}
	err := a.dispatch(ctx, args, sio)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "millrace: "+oneLine(err))
		return 2
	default:
		fmt.Fprintln(stderr, "millrace: "+oneLine(err))
		return 1
	}
}

// oneLine keeps an error message on one line, whatever a driver put in it.
func oneLine(err error) string {
	s := strings.TrimSuffix(err.Error(), ": "+errUsage.Error())
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func (a *app) dispatch(ctx context.Context, args []string, sio stdio) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(sio.out, usage)
		if len(args) == 0 {
			return fmt.Errorf("no command: %w", errUsage)
		}
		return nil
	}
	if args[0] != "dlq" {
		return fmt.Errorf("unknown command %q (try: millrace dlq list): %w", args[0], errUsage)
	}
	if len(args) < 2 {
		return fmt.Errorf("dlq needs a subcommand: list, show, replay, purge or migrate: %w", errUsage)
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "list":
		return a.list(ctx, rest, sio)
	case "show":
		return a.show(ctx, rest, sio)
	case "replay":
		return a.replay(ctx, rest, sio)
	case "purge":
		return a.purge(ctx, rest, sio)
	case "migrate":
		return a.migrate(ctx, rest, sio)
	}
	return fmt.Errorf("unknown dlq subcommand %q (list, show, replay, purge, migrate): %w", cmd, errUsage)
}
