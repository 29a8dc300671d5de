package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/deadletter"
)

func (a *app) newPurgeCommand() *cobra.Command {
	var (
		src         sourceFlags
		ff          filterFlags
		yes, dryRun bool
	)
	c := &cobra.Command{
		Use:   "purge (ID... | filter) [flags]",
		Short: "Delete dead letters for good",
		Long: "purge deletes dead letters for good. It needs IDs or an explicit filter (never everything by\n" +
			"default) and asks for yes on stdin unless --yes. --dry-run prints the IDs it would delete.",
		Example: "  millrace dlq purge --reason malformed --since 7d --dry-run\n  millrace dlq purge 17 18 --yes",
	}
	a.addSource(c, &src)
	addFilter(c, &ff)
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print the IDs that would be purged; delete nothing")
	c.RunE = func(c *cobra.Command, ids []string) error {
		a.sourceFromEnv(c, &src)
		return a.purge(c.Context(), stdioOf(c), src, ff, ids, yes, dryRun)
	}
	return c
}

// purge deletes dead letters for good. It needs IDs or an explicit filter, and asks for
// confirmation on stdin unless yes.
func (a *app) purge(ctx context.Context, sio stdio, src sourceFlags, ff filterFlags, ids []string, yes, dryRun bool) error {
	f, err := a.filter(ff)
	if err != nil {
		return err
	}
	switch {
	case len(ids) > 0 && !f.IsZero():
		return fmt.Errorf("purge takes IDs or a filter, not both: %w", errUsage)
	case len(ids) == 0 && f.IsZero():
		return fmt.Errorf("purge needs IDs or an explicit filter (--topic, --reason, --handler, --error, --since, --until): %w", errUsage)
	}
	store, closeStore, err := a.openStore(ctx, src, f.Topic)
	if err != nil {
		return err
	}
	defer closeStore()

	var n int64
	what := describe(f)
	if len(ids) > 0 {
		for _, id := range ids { // every ID must exist before anything is deleted
			if _, err := store.Get(ctx, id); err != nil {
				return fmt.Errorf("%w; nothing purged", err)
			}
		}
		n, what = int64(len(ids)), "IDs "+strings.Join(ids, ", ")
	} else if n, err = store.Count(ctx, f); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(sio.out, "no dead letters match (%s); nothing purged\n", what)
		return nil
	}
	if dryRun {
		sel := ids
		if len(sel) == 0 {
			if err := eachEntry(ctx, store, f, func(e deadletter.Entry) error {
				sel = append(sel, e.ID)
				return nil
			}); err != nil {
				return err
			}
		}
		fmt.Fprintf(sio.out, "dry run: would purge %d dead letters (%s):\n", len(sel), what)
		for _, id := range sel {
			fmt.Fprintf(sio.out, "  %s\n", id)
		}
		fmt.Fprintln(sio.out, "nothing was deleted")
		return nil
	}
	if !yes {
		fmt.Fprintf(sio.err, "Delete %d dead letters (%s) for good? Type yes to confirm: ", n, what)
		line, _ := bufio.NewReader(sio.in).ReadString('\n')
		if strings.TrimSpace(strings.ToLower(line)) != "yes" {
			return errors.New("purge not confirmed; nothing purged")
		}
	}
	deleted, err := deleteSelection(ctx, store, ids, f)
	if err != nil {
		return fmt.Errorf("purge stopped after %d: %w", deleted, err)
	}
	fmt.Fprintf(sio.out, "purged %d dead letters (%s)\n", deleted, what)
	return nil
}

// eachEntry calls fn with every entry matching f, in store order, a page at a time (one page
// of payloads in memory at once).
func eachEntry(ctx context.Context, store deadletter.Store, f deadletter.Filter, fn func(deadletter.Entry) error) error {
	page := deadletter.Page{Limit: deadletter.MaxPageLimit}
	for {
		entries, next, err := store.List(ctx, f, page)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		page.After = next
	}
}

// deleteSelection deletes ids, or every entry matching f (in one statement where the store can).
func deleteSelection(ctx context.Context, store deadletter.Store, ids []string, f deadletter.Filter) (int64, error) {
	var deleted int64
	if len(ids) > 0 {
		for _, id := range ids {
			if err := store.Delete(ctx, id); err != nil && !errors.Is(err, deadletter.ErrNotFound) {
				return deleted, err
			}
			deleted++
		}
		return deleted, nil
	}
	if p, ok := store.(deadletter.Purger); ok {
		return p.Purge(ctx, f)
	}
	page := deadletter.Page{Limit: deadletter.MaxPageLimit}
	for {
		entries, next, err := store.List(ctx, f, page)
		if err != nil {
			return deleted, err
		}
		for _, e := range entries {
			if err := store.Delete(ctx, e.ID); err != nil && !errors.Is(err, deadletter.ErrNotFound) {
				return deleted, err
			}
			deleted++
		}
		if next == "" {
			return deleted, nil
		}
		page.After = next
	}
}
