package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/deadletter"
)

// countJSON is one value and how many dead letters have it.
type countJSON struct {
	Value string `json:"value"`
	Count int64  `json:"count"`
}

// statsJSON is the --json form of stats.
type statsJSON struct {
	Total     int64       `json:"total"`
	Filter    string      `json:"filter"`
	Oldest    *time.Time  `json:"oldest_failure,omitempty"`
	Newest    *time.Time  `json:"newest_failure,omitempty"`
	ByReason  []countJSON `json:"by_reason"`
	ByHandler []countJSON `json:"by_handler"`
	ByError   []countJSON `json:"by_error"`
	ByTopic   []countJSON `json:"by_topic"`
	// distinct is how many values each count has before --top cut it (text output only).
	distinct map[string]int
}

// tally counts dead letters by one property.
type tally map[string]int64

// top returns the n most frequent values (all when n is 0), most frequent first, ties by value.
func (t tally) top(n int) []countJSON {
	out := make([]countJSON, 0, len(t))
	for v, c := range t {
		out = append(out, countJSON{Value: v, Count: c})
	}
	slices.SortFunc(out, func(a, b countJSON) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Value, b.Value))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// firstLine is the error text stats groups by: the first line of LastError, trimmed.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func (a *app) newStatsCommand() *cobra.Command {
	var (
		src    sourceFlags
		ff     filterFlags
		asJSON bool
		top    int
	)
	c := &cobra.Command{
		Use:   "stats [filter] [flags]",
		Short: "Count dead letters by reason, handler, error and topic",
		Long: "stats counts the dead letters matching the filter (a time window with --since/--until) by\n" +
			"reason, by handler, by error text (the first line of the last error) and by original topic,\n" +
			"most frequent first. It reads every matching dead letter once, from any store.",
		Example: "  millrace dlq stats --since 2d\n  millrace dlq stats --store sqs+https://sqs.eu-west-1.amazonaws.com --topic push.requested --since 7d --json",
		Args:    noArgs,
	}
	a.addSource(c, &src)
	addFilter(c, &ff)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts instead of tables (errors too)")
	c.Flags().IntVar(&top, "top", 10, "most values shown per count, most frequent first (0 = all)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		a.sourceFromEnv(c, &src)
		if top < 0 {
			return fmt.Errorf("--top %d: must not be negative: %w", top, errUsage)
		}
		f, err := a.filter(ff)
		if err != nil {
			return err
		}
		ctx := c.Context()
		store, closeStore, err := a.openStore(ctx, src, f.Topic)
		if err != nil {
			return err
		}
		defer closeStore()
		var (
			total                           int64
			oldest, newest                  time.Time
			reasons, handlers, errs, topics = tally{}, tally{}, tally{}, tally{}
		)
		err = eachEntry(ctx, store, f, func(e deadletter.Entry) error {
			r := e.Record
			total++
			reasons[string(r.Reason)]++
			handlers[r.Handler]++
			errs[firstLine(r.LastError)]++
			topics[r.OriginalTopic]++
			if t := r.LastFailureAt; !t.IsZero() {
				if oldest.IsZero() || t.Before(oldest) {
					oldest = t
				}
				if t.After(newest) {
					newest = t
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		s := statsJSON{
			Total: total, Filter: describe(f), Oldest: timePtr(oldest), Newest: timePtr(newest),
			ByReason: reasons.top(top), ByHandler: handlers.top(top), ByError: errs.top(top), ByTopic: topics.top(top),
			distinct: map[string]int{"REASON": len(reasons), "HANDLER": len(handlers), "ERROR (first line)": len(errs), "TOPIC": len(topics)},
		}
		if asJSON {
			return writeJSON(c.OutOrStdout(), s)
		}
		return writeStats(c.OutOrStdout(), s)
	}
	return c
}

func writeStats(w io.Writer, s statsJSON) error {
	fmt.Fprintf(w, "%d dead letters (%s)", s.Total, s.Filter)
	if s.Oldest != nil {
		fmt.Fprintf(w, ", last failures from %s to %s", formatTime(*s.Oldest), formatTime(*s.Newest))
	}
	fmt.Fprintln(w)
	if s.Total == 0 {
		return nil
	}
	for _, sec := range []struct {
		title string
		rows  []countJSON
		width int
	}{{"REASON", s.ByReason, 20}, {"HANDLER", s.ByHandler, 40}, {"ERROR (first line)", s.ByError, 80}, {"TOPIC", s.ByTopic, 60}} {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tCOUNT\n", sec.title)
		var shown int64
		for _, r := range sec.rows {
			fmt.Fprintf(tw, "%s\t%d\n", cell(r.Value, sec.width), r.Count)
			shown += r.Count
		}
		if more := s.distinct[sec.title] - len(sec.rows); more > 0 {
			fmt.Fprintf(tw, "(%d more)\t%d\n", more, s.Total-shown)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
