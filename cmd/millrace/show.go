package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) newShowCommand() *cobra.Command {
	var (
		src    sourceFlags
		topic  string
		asJSON bool
		stack  bool
	)
	c := &cobra.Command{
		Use:   "show ID [flags]",
		Short: "Print one dead letter in full",
		Long: "show prints one dead letter in full: every field and the metadata, the payload as text when\n" +
			"it is valid UTF-8 and as a hex dump otherwise. For a handler that panicked, it prints the\n" +
			"first lines of the panic's stack (the panic and the frame that panicked); --stack prints\n" +
			"all of it (at most 8 KiB). Where the attempt that gave up was traced, it prints the trace id\n" +
			"and span id of its span (Trace). --json adds payload (base64) and payload_text, and the whole stack.",
		Example: "  millrace dlq show 42\n  millrace dlq show 1710408477000-0 --store redis://127.0.0.1:6379/0 --topic orders --json",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("show takes exactly one ID, got %d: %w", len(args), errUsage)
			}
			return nil
		},
	}
	a.addSource(c, &src)
	c.Flags().StringVar(&topic, "topic", "", "broker store: the `topic` whose dead-letter destination holds ID")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (payload base64, and payload_text when UTF-8; errors too)")
	c.Flags().BoolVar(&stack, "stack", false, "print a recovered panic's whole stack, not only its first lines")
	c.RunE = func(c *cobra.Command, args []string) error {
		a.sourceFromEnv(c, &src)
		store, closeStore, err := a.openStore(c.Context(), src, topic)
		if err != nil {
			return err
		}
		defer closeStore()
		e, err := store.Get(c.Context(), args[0])
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(c.OutOrStdout(), toJSON(e, true))
		}
		writeDetail(c.OutOrStdout(), e, stack)
		return nil
	}
	return c
}
