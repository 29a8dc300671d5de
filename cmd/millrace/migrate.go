package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/deadletter/pgstore"
)

func (a *app) newMigrateCommand() *cobra.Command {
	var src sourceFlags
	c := &cobra.Command{
		Use:     "migrate --store postgres://...",
		Short:   "Create or upgrade the table store's table",
		Long:    "migrate creates or upgrades the table store's table (idempotent, safe from many processes at once).",
		Example: "  millrace dlq migrate --store 'postgres://app@db:5432/app?sslmode=disable' --table dead_letters",
		Args:    noArgs,
	}
	a.addSource(c, &src)
	c.RunE = func(c *cobra.Command, _ []string) error {
		a.sourceFromEnv(c, &src)
		ctx := c.Context()
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
		fmt.Fprintf(c.OutOrStdout(), "%s is at schema version %d\n", pg.Table(), v)
		return nil
	}
	return c
}
