package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/deadletter"
)

func (a *app) newListCommand() *cobra.Command {
	var (
		src    sourceFlags
		ff     filterFlags
		asJSON bool
		limit  int
		after  string
	)
	c := &cobra.Command{
		Use:   "list [flags]",
		Short: "Print one page of the dead letters matching a filter",
		Long: "list prints one page of the dead letters matching the filter, oldest first, as a table or\n" +
			"with --json as {\"total\", \"next\", \"entries\"} (no payloads: payload_size). The last line\n" +
			"(or \"next\") gives the --after cursor of the next page.",
		Example: "  millrace dlq list --store postgres://app@db/app --reason exhausted --since 2d\n" +
			"  millrace dlq list --store redis://127.0.0.1:6379/0 --topic orders --handler billing --error 503 --json",
		Args: noArgs,
	}
	a.addSource(c, &src)
	addFilter(c, &ff)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts instead of a table (errors too)")
	c.Flags().IntVar(&limit, "limit", 50, fmt.Sprintf("most entries to print (1..%d)", deadletter.MaxPageLimit))
	c.Flags().StringVar(&after, "after", "", "`cursor` printed by the previous page")
	c.RunE = func(c *cobra.Command, _ []string) error {
		a.sourceFromEnv(c, &src)
		if limit < 1 || limit > deadletter.MaxPageLimit {
			return fmt.Errorf("--limit %d: must be 1..%d: %w", limit, deadletter.MaxPageLimit, errUsage)
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
		total, err := store.Count(ctx, f)
		if err != nil {
			return err
		}
		entries, next, err := store.List(ctx, f, deadletter.Page{After: after, Limit: limit})
		if err != nil {
			return err
		}
		out := c.OutOrStdout()
		if asJSON {
			v := struct {
				Total   int64       `json:"total"`
				Next    string      `json:"next,omitempty"`
				Entries []entryJSON `json:"entries"`
			}{Total: total, Next: next, Entries: make([]entryJSON, 0, len(entries))}
			for _, e := range entries {
				v.Entries = append(v.Entries, toJSON(e, false))
			}
			return writeJSON(out, v)
		}
		if err := writeTable(out, entries); err != nil {
			return err
		}
		fmt.Fprintf(out, "%d of %d dead letters (%s)\n", len(entries), total, describe(f))
		if next != "" {
			fmt.Fprintf(out, "next page: --after %s\n", next)
		}
		return nil
	}
	return c
}

// writeJSON prints v indented, for scripts and people alike.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
