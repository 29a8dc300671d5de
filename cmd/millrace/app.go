package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
	// now is the clock of relative --since/--until values and of the progress bar's rate.
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

// stdio is one invocation's standard streams.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// stdioOf returns the streams a command was given.
func stdioOf(c *cobra.Command) stdio {
	return stdio{in: c.InOrStdin(), out: c.OutOrStdout(), err: c.ErrOrStderr()}
}

// version is the module version the binary was built from (`go install ...@v1.2.3`), or
// "(devel)" for a build from a working tree.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

const rootLong = `millrace operates millrace dead letters: it lists, shows, counts, replays and purges
them in the PostgreSQL table store or in a broker's own dead-letter destination, and lists the
dead-letter destinations a broker holds.

Source (where the dead letters are), on every dlq command:
  --store URL      postgres://... for the table store, or a broker URL for that broker's
                   dead-letter destination of --topic (env MILLRACE_STORE)
  --table NAME     table store table (env MILLRACE_TABLE, default millrace_dead_letters)
  --schema NAME    table store schema (env MILLRACE_SCHEMA, default public)
  --dlq-topic T    a broker store's destination name, when it is not the adapter's default for --topic

Broker URLs: redis://, rediss://, amqp://, amqps://, kafka://host:port, sqs+http://host:port,
sqs+https://sqs.<region>.amazonaws.com. Unknown URL parameters are refused, by name.

Filter (list, replay, purge, stats):
  --topic T  --reason discarded|exhausted|malformed  --handler NAME  --error TEXT
  --since T  --until T   (RFC 3339, 2006-01-02, or a duration ago: 90m, 24h, 2d, 1d12h)

Exit status: 0 done, 1 failed (nothing changed unless the message says so), 2 bad usage.
With --json, an error is one JSON object on stderr: {"error": "...", "exit": N}.`

// newRoot builds the command tree. It is built anew for each run, so that flag values and
// environment defaults never leak from one invocation into the next.
func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "millrace",
		Short:         "Operate millrace dead letters",
		Long:          rootLong,
		Version:       version(),
		SilenceErrors: true, // run prints the one-line error itself
		SilenceUsage:  true, // an error is one line, not the whole usage
		Args:          groupArgs,
		RunE:          usageOnStderr,

		SuggestionsMinimumDistance: 2,
	}
	// A command that groups others runs only to refuse a missing command: its usage shows the
	// "[command]" line, not a "[flags]" line of its own.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}\n  {{.UseLine}}{{end}}",
		"{{if and .Runnable (not .HasAvailableSubCommands)}}\n  {{.UseLine}}{{end}}", 1))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%v%s (see %s --help): %w", err, singleDashHint(c, err), c.CommandPath(), errUsage)
	})
	dlq := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, count, replay and purge dead letters",
		Long:  "dlq commands read and change the dead letters of one source: the table store or a\nbroker's dead-letter destination (see millrace --help for --store and the filters).",
		Args:  groupArgs,
		RunE:  usageOnStderr,

		SuggestionsMinimumDistance: 2,
	}
	dlq.AddCommand(a.newListCommand(), a.newShowCommand(), a.newReplayCommand(), a.newPurgeCommand(),
		a.newStatsCommand(), a.newTopicsCommand(), a.newMigrateCommand())
	root.AddCommand(dlq)
	root.AddCommand(newPlanCommand(a))
	return root
}

// singleDashHint points out a long flag given with one dash (`-json`, which Go's flag package
// took before the CLI moved to cobra): pflag reads it as the shorthands -j -s -o -n.
func singleDashHint(c *cobra.Command, err error) string {
	_, arg, ok := strings.Cut(err.Error(), "unknown shorthand flag: ")
	if !ok {
		return ""
	}
	_, word, ok := strings.Cut(arg, " in -")
	name, _, _ := strings.Cut(word, "=")
	if !ok || c.Flags().Lookup(name) == nil {
		return ""
	}
	return "; long flags take two dashes: --" + name
}

// groupArgs refuses an argument to a command that only groups others: it names no command.
func groupArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() || sub.Name() == "help" {
			names = append(names, sub.Name())
		}
	}
	hint := ""
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		hint = ", did you mean " + strconv.Quote(s[0]) + "?"
	}
	return fmt.Errorf("unknown command %q for %q%s (commands: %s): %w", args[0], c.CommandPath(), hint, strings.Join(names, ", "), errUsage)
}

// usageOnStderr is the run of a command that only groups others, called without one: its usage
// on stderr and exit status 2, as for any bad usage.
func usageOnStderr(c *cobra.Command, _ []string) error {
	fmt.Fprint(c.ErrOrStderr(), c.UsageString())
	where := ""
	if c.HasParent() {
		where = c.Name() + ": "
	}
	return fmt.Errorf("%sno command given (see %s --help): %w", where, c.CommandPath(), errUsage)
}

// run executes one command line and returns the exit status. An error is one line on stderr,
// or with --json one JSON object.
func (a *app) run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := a.newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := 1
	if errors.Is(err, errUsage) || isCobraUsage(err) {
		code = 2
	}
	msg := oneLine(err)
	if cmd != nil && wantsJSON(cmd, args) {
		b, _ := json.Marshal(struct {
			Error string `json:"error"`
			Exit  int    `json:"exit"`
		}{msg, code})
		fmt.Fprintf(stderr, "%s\n", b)
		return code
	}
	fmt.Fprintln(stderr, "millrace: "+msg)
	return code
}

// isCobraUsage reports an error cobra returns itself for bad usage (an argument or flag rule
// of its own), which carries no errUsage.
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command ") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag") || strings.Contains(s, "flag needs an argument") ||
		strings.HasPrefix(s, "if any flags in the group") || strings.HasPrefix(s, "required flag")
}

// wantsJSON reports whether the command has a --json flag and the command line set it. When
// flag parsing stopped at an error the flag may not have been reached: the arguments decide.
func wantsJSON(cmd *cobra.Command, args []string) bool {
	f := cmd.Flags().Lookup("json")
	if f == nil {
		return false
	}
	if f.Changed {
		return f.Value.String() == "true"
	}
	for _, arg := range args {
		if arg == "--" {
			break
		}
		if v, ok := strings.CutPrefix(arg, "--json="); ok {
			b, err := strconv.ParseBool(v)
			return err == nil && b
		}
		if arg == "--json" {
			return true
		}
	}
	return false
}

// oneLine keeps an error message on one line, whatever a driver put in it, without the
// errUsage marker that only chooses the exit status.
func oneLine(err error) string {
	s := strings.TrimSuffix(err.Error(), ": "+errUsage.Error())
	s = strings.TrimPrefix(s, errUsage.Error()+": ")
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// noArgs refuses positional arguments, naming the command.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q: %w", c.Name(), args, errUsage)
	}
	return nil
}

// completeReasons completes --reason.
func completeReasons(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return slices.Clone([]cobra.Completion{"discarded", "exhausted", "malformed"}), cobra.ShellCompDirectiveNoFileComp
}
