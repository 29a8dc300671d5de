package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/brokerurl"
)

// destinationJSON is one destination in topics --json.
type destinationJSON struct {
	Name        string `json:"name"`
	Topic       string `json:"topic,omitempty"`
	Depth       int64  `json:"depth"`
	Approximate bool   `json:"approximate,omitempty"`
}

func (a *app) newTopicsCommand() *cobra.Command {
	var (
		storeURL string
		asJSON   bool
	)
	c := &cobra.Command{
		Use:   "topics --store URL [flags]",
		Short: "List the dead-letter destinations a broker holds, and their depth",
		Long: "topics lists the dead-letter destinations (streams, queues, topics) the broker of --store\n" +
			"holds, named as its adapter names them, with how many dead letters each holds (\"~\" when the\n" +
			"broker's count is an estimate). The table store has none: millrace dlq stats counts its\n" +
			"dead letters by topic.",
		Example: "  millrace dlq topics --store redis://127.0.0.1:6379/0\n  millrace dlq topics --store kafka://127.0.0.1:9092 --json",
		Args:    noArgs,
	}
	c.Flags().StringVar(&storeURL, "store", "", "broker `URL` (env MILLRACE_STORE)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts instead of a table (errors too)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		a.fromEnv(c, "store", "MILLRACE_STORE", &storeURL)
		switch {
		case storeURL == "":
			return fmt.Errorf("topics needs --store URL (or MILLRACE_STORE): the broker whose dead-letter destinations to list: %w", errUsage)
		case isTableStore(storeURL):
			return fmt.Errorf("topics lists a broker's dead-letter destinations; --store %s is the table store (millrace dlq stats counts its dead letters by topic): %w", redact(storeURL), errUsage)
		}
		ctx := c.Context()
		b, err := a.openBroker(ctx, storeURL)
		if err != nil {
			return err
		}
		defer b.Close()
		dests, err := b.DeadLetterDestinations(ctx)
		if err != nil {
			return fmt.Errorf("topics on %s: %w", redact(storeURL), err)
		}
		return writeDestinations(c, storeURL, dests, asJSON)
	}
	return c
}

func writeDestinations(c *cobra.Command, storeURL string, dests []brokerurl.Destination, asJSON bool) error {
	out := c.OutOrStdout()
	if asJSON {
		v := struct {
			Broker       string            `json:"broker"`
			Destinations []destinationJSON `json:"destinations"`
		}{Broker: redact(storeURL), Destinations: make([]destinationJSON, 0, len(dests))}
		for _, d := range dests {
			v.Destinations = append(v.Destinations, destinationJSON{Name: d.Name, Topic: d.Topic, Depth: d.Depth, Approximate: d.Approximate})
		}
		return writeJSON(out, v)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DESTINATION\tTOPIC\tDEPTH")
	var total int64
	approx := false
	for _, d := range dests {
		depth := strconv.FormatInt(d.Depth, 10)
		if d.Approximate {
			depth, approx = "~"+depth, true
		}
		topic := d.Topic
		if topic == "" {
			topic = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Name, topic, depth)
		total += d.Depth
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	sum := strconv.FormatInt(total, 10)
	if approx {
		sum = "~" + sum
	}
	fmt.Fprintf(out, "%d dead-letter destinations, %s dead letters, on %s\n", len(dests), sum, redact(storeURL))
	return nil
}
