package main

import (
	"context"
	"fmt"

	"github.com/millrace/millrace/deadletter/pgstore"
)

// migrate creates or upgrades the table store's table.
func (a *app) migrate(ctx context.Context, args []string, sio stdio) error {
	fs := newFlagSet("migrate", sio.err)
	var src sourceFlags
	a.addSource(fs, &src)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("migrate takes no arguments: %w", errUsage)
	}
	store, closeStore, err := a.openStore(ctx, src, "")
	if err != nil {
		return err
	}
	defer closeStore()
	pg, ok := store.(*pgstore.Store)
	if !ok {
		return fmt.Errorf("migrate applies to the table store (--store postgres://...) only: %w", errUsage)
	}
	if err := pg.Migrate(ctx); err != nil {
		return err
	}
	v, err := pg.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(sio.out, "%s is at schema version %d\n", pg.Table(), v)
	return nil
}
