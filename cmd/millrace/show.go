package main

import (
	"context"
	"encoding/json"
	"fmt"
)

// show prints one dead letter in full, its payload as text when it is UTF-8 and as a hex dump
// otherwise.
func (a *app) show(ctx context.Context, args []string, sio stdio) error {
	fs := newFlagSet("show", sio.err)
	var (
		src    sourceFlags
		topic  string
		asJSON bool
	)
	a.addSource(fs, &src)
	fs.StringVar(&topic, "topic", "", "broker store: the topic whose dead-letter destination holds ID")
	fs.BoolVar(&asJSON, "json", false, "print JSON (payload base64, and payload_text when UTF-8)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("show takes exactly one ID, got %d: %w", len(pos), errUsage)
	}
	store, closeStore, err := a.openStore(ctx, src, topic)
	if err != nil {
		return err
	}
	defer closeStore()
	e, err := store.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(sio.out)
		enc.SetIndent("", "  ")
		return enc.Encode(toJSON(e, true))
	}
	writeDetail(sio.out, e)
	return nil
}
