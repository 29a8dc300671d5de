package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/millrace/millrace/deadletter"
)

// list prints one page of the dead letters matching the filter.
func (a *app) list(ctx context.Context, args []string, sio stdio) error {
	fs := newFlagSet("list", sio.err)
	var (
		src    sourceFlags
		ff     filterFlags
		asJSON bool
		limit  int
		after  string
	)
	a.addSource(fs, &src)
	addFilter(fs, &ff)
	fs.BoolVar(&asJSON, "json", false, "print JSON for scripts instead of a table")
	fs.IntVar(&limit, "limit", 50, fmt.Sprintf("most entries to print (1..%d)", deadletter.MaxPageLimit))
	fs.StringVar(&after, "after", "", "cursor printed by the previous page")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("list takes no arguments, got %q: %w", pos, errUsage)
	}
	if limit < 1 || limit > deadletter.MaxPageLimit {
		return fmt.Errorf("--limit %d: must be 1..%d: %w", limit, deadletter.MaxPageLimit, errUsage)
	}
	f, err := a.filter(ff)
	if err != nil {
		return err
	}
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
	if asJSON {
		out := struct {
			Total   int64       `json:"total"`
			Next    string      `json:"next,omitempty"`
			Entries []entryJSON `json:"entries"`
		}{Total: total, Next: next, Entries: make([]entryJSON, 0, len(entries))}
		for _, e := range entries {
			out.Entries = append(out.Entries, toJSON(e, false))
		}
		enc := json.NewEncoder(sio.out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if err := writeTable(sio.out, entries); err != nil {
		return err
	}
	fmt.Fprintf(sio.out, "%d of %d dead letters (%s)\n", len(entries), total, describe(f))
	if next != "" {
		fmt.Fprintf(sio.out, "next page: --after %s\n", next)
	}
	return nil
}
