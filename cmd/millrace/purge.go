package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/millrace/millrace/deadletter"
)

// purge deletes dead letters for good. It needs IDs or an explicit filter, and asks for
// confirmation on stdin unless --yes.
func (a *app) purge(ctx context.Context, args []string, sio stdio) error {
	fs := newFlagSet("purge", sio.err)
	var (
		src sourceFlags
		ff  filterFlags
		yes bool
	)
	a.addSource(fs, &src)
	addFilter(fs, &ff)
	fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	ids, err := fs.parse(args)
	if err != nil {
		return err
	}
	f, err := a.filter(ff)
	if err != nil {
		return err
	}
	switch {
	case len(ids) > 0 && !f.IsZero():
		return fmt.Errorf("purge takes IDs or a filter, not both: %w", errUsage)
	case len(ids) == 0 && f.IsZero():
		return fmt.Errorf("purge needs IDs or an explicit filter (--topic, --reason, --since, --until): %w", errUsage)
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
