// Command millrace is the operator's tool for millrace dead letters: list, show, replay and
// purge them in the PostgreSQL table store or in a broker's dead-letter destination.
// See README.md beside this file.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := newApp().run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
