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
	// The first Ctrl-C (or SIGTERM) cancels ctx; stopping the notification then gives the
	// signals their default action back, so a second one ends a command that is slow to stop.
	context.AfterFunc(ctx, stop)
	code := newApp().run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
