package brokerurl_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/millrace/millrace/brokerurl"

	// Registers redis:// and rediss://; import the adapters of the brokers you support.
	_ "github.com/millrace/millrace/adapters/redisstream"
)

// A program names its brokers with blank imports and opens the adapter the operator's URL names.
// This needs a Redis at 127.0.0.1:6379, so it is compiled, not run.
func ExampleOpenAdapter() {
	ctx := context.Background()
	a, err := brokerurl.OpenAdapter(ctx, "redis://127.0.0.1:6379/0?group=billing&processing_budget=20s",
		brokerurl.Options{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	// Hand a to router.New, or publish with a.Publisher().
	fmt.Println(a.Capabilities().Broker)
}

// A typo in a parameter is an error naming it, before any connection is made: nothing falls
// back to a default.
func ExampleOpenAdapter_unknownParameter() {
	_, err := brokerurl.OpenAdapter(context.Background(), "redis://127.0.0.1:6379/0?group=billing&windw=8", brokerurl.Options{})
	var unknown *brokerurl.UnknownParameterError
	if errors.As(err, &unknown) {
		fmt.Println("unknown parameters:", unknown.Names)
		fmt.Println(errors.Is(err, brokerurl.ErrUnknownParameter))
	}
	// Output:
	// unknown parameters: [windw]
	// true
}

// A program that owns its process (a CLI) silences the broker clients' own process-wide logs,
// so an unreachable broker is reported once, by the error. A library must not do this.
func ExampleMux_SilenceClientLogs() {
	brokerurl.DefaultMux().SilenceClientLogs()
	b, err := brokerurl.OpenBroker(context.Background(), os.Getenv("BROKER_URL"), brokerurl.Options{NoConsume: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "millrace:", err)
		os.Exit(1)
	}
	defer b.Close()
}
