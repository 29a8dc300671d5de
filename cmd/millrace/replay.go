package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/spf13/cobra"
	"golang.org/x/time/rate"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// replayItem is one dead letter selected for replay.
type replayItem struct {
	id, target string
	native     bool // the record has Native content: only a deadletter.NativePublisher replays it
}

func (a *app) newReplayCommand() *cobra.Command {
	var o replayOptions
	c := &cobra.Command{
		Use:   "replay (ID... | filter | --all) (--keep-history | --reset-history) [flags]",
		Short: "Re-publish dead letters to their original topic",
		Long: "replay re-publishes each dead letter, same UUID and payload bytes, to its original topic (or\n" +
			"--to-topic) through the broker's millrace adapter, at most --rate per second, then deletes it:\n" +
			"publish first, delete after, so a replay stopped half-way loses nothing. Every ID and every\n" +
			"target topic is checked before anything is published. --dry-run prints the IDs it would replay.",
		Example: "  millrace dlq replay --reason exhausted --since 2d --reset-history --broker redis://127.0.0.1:6379/0 --rate 50\n" +
			"  millrace dlq replay --store kafka://127.0.0.1:9092 --topic orders --handler billing --keep-history --dry-run",
	}
	a.addSource(c, &o.src)
	addFilter(c, &o.ff)
	fs := c.Flags()
	fs.BoolVar(&o.all, "all", false, "replay every dead letter of the source")
	fs.BoolVar(&o.keep, "keep-history", false, "keep the millrace-* attempt headers and dead-letter keys: attempts go on counting")
	fs.BoolVar(&o.reset, "reset-history", false, "remove every millrace-* key: the message starts again at attempt 1")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the IDs that would be replayed and where; publish and delete nothing")
	fs.StringVar(&o.brokerURL, "broker", "", "broker `URL` to publish to (env MILLRACE_BROKER; default: the --store broker)")
	fs.StringVar(&o.toTopic, "to-topic", "", "publish every dead letter to this `topic` instead of its original topic")
	fs.Float64Var(&o.perSecond, "rate", 0, "most dead letters re-published per second (0 = no limit)")
	c.RunE = func(c *cobra.Command, ids []string) error {
		a.sourceFromEnv(c, &o.src)
		a.fromEnv(c, "broker", "MILLRACE_BROKER", &o.brokerURL)
		return a.replay(c.Context(), stdioOf(c), o, ids)
	}
	return c
}

// replayOptions are replay's flags.
type replayOptions struct {
	src                sourceFlags
	ff                 filterFlags
	all, keep, reset   bool
	dryRun             bool
	brokerURL, toTopic string
	perSecond          float64
}

// replay re-publishes dead letters to their original topic (or --to-topic) through a broker's
// millrace adapter. A dead letter leaves the store only after its re-publish succeeded, so a
// replay stopped half-way (error, Ctrl-C) loses nothing: what was not re-published is still in
// the store. The worst case is the one in between: published, then the deletion failed; that
// dead letter stays in the store and a second replay publishes it again (at-least-once).
//
// A dead letter whose record has Native content (a Redis entry that was not a Watermill
// message) is re-published exactly, field for field, through the broker's
// deadletter.NativePublisher, whatever the history flag says (the content is the producer's,
// not millrace's). A broker that cannot do so refuses it: the dead letter stays in the store,
// the others are replayed, and the command exits non-zero naming the refused ones. So does a
// dead letter that the broker says it would never take as it is (brokerurl.ReplayChecker: an
// SQS FIFO queue's message without a valid message group, one larger than the queue takes).
// --dry-run names both kinds; not the native content a NativePublisher refuses only when it
// publishes (an SQS message with more attributes than SQS takes).
func (a *app) replay(ctx context.Context, sio stdio, o replayOptions, ids []string) error {
	src, ff, all, keep, reset, dryRun := o.src, o.ff, o.all, o.keep, o.reset, o.dryRun
	brokerURL, toTopic, perSecond := o.brokerURL, o.toTopic, o.perSecond
	f, err := a.filter(ff)
	if err != nil {
		return err
	}
	switch {
	case keep == reset:
		return fmt.Errorf("replay needs exactly one of --keep-history or --reset-history: %w", errUsage)
	case len(ids) > 0 && (!f.IsZero() || all):
		return fmt.Errorf("replay takes IDs or a filter (or --all), not both: %w", errUsage)
	case len(ids) == 0 && f.IsZero() && !all:
		return fmt.Errorf("replay needs IDs, a filter (--topic, --reason, --handler, --error, --since, --until) or --all: %w", errUsage)
	case perSecond < 0:
		return fmt.Errorf("--rate %v: must not be negative: %w", perSecond, errUsage)
	}
	history := deadletter.ResetHistory
	if keep {
		history = deadletter.KeepHistory
	}
	store, closeStore, err := a.openStore(ctx, src, f.Topic)
	if err != nil {
		return err
	}
	defer closeStore()
	if brokerURL == "" && !isTableStore(src.store) {
		brokerURL = src.store // a broker's dead letters go back to the same broker
	}
	var broker brokerurl.Broker
	switch {
	case brokerURL != "":
		if broker, err = a.openBroker(ctx, brokerURL); err != nil {
			return err
		}
		defer broker.Close()
	case !dryRun:
		return fmt.Errorf("replay needs --broker URL (or MILLRACE_BROKER): where to publish: %w", errUsage)
	}

	items, err := selectForReplay(ctx, store, ids, f, toTopic)
	if err != nil {
		return err
	}
	targets := map[string]int{}
	for _, it := range items {
		targets[it.target]++
	}
	if broker != nil {
		for _, t := range slices.Sorted(maps.Keys(targets)) {
			ok, err := broker.TopicExists(ctx, t)
			if err != nil {
				return fmt.Errorf("replay target %q: %w", t, err)
			}
			if !ok {
				return fmt.Errorf("replay target %q does not exist on %s; nothing replayed", t, redact(brokerURL))
			}
		}
	}
	if dryRun {
		fmt.Fprintf(sio.out, "dry run: would replay %d dead letters (history %s):\n", len(items), history)
		for _, t := range slices.Sorted(maps.Keys(targets)) {
			fmt.Fprintf(sio.out, "  %d -> %s\n", targets[t], t)
		}
		_, canNative := broker.(deadletter.NativePublisher)
		checker, _ := broker.(brokerurl.ReplayChecker)
		tw := tabwriter.NewWriter(sio.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTARGET")
		for _, it := range items {
			if it.native && broker != nil && !canNative {
				fmt.Fprintf(tw, "%s\t%s\twould refuse: %s\n", it.id, it.target, errNoNativeReplay)
				continue
			}
			if !it.native && checker != nil {
				refusal, err := checkStored(ctx, store, broker, checker, it, history)
				if err != nil { // the replay would stop here too
					_ = tw.Flush()
					return fmt.Errorf("dry run: %w", err)
				}
				if refusal != nil {
					fmt.Fprintf(tw, "%s\t%s\twould refuse: %s\n", it.id, it.target, refusal)
					continue
				}
			}
			fmt.Fprintf(tw, "%s\t%s\n", it.id, it.target)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(sio.out, "nothing was published or deleted")
		return nil
	}
	return a.runReplay(ctx, sio, store, broker, items, history, perSecond)
}

// selectForReplay resolves the selection before anything is published: every ID must exist,
// and every dead letter must have a target.
func selectForReplay(ctx context.Context, store deadletter.Store, ids []string, f deadletter.Filter, toTopic string) ([]replayItem, error) {
	var items []replayItem
	add := func(e deadletter.Entry) error {
		t := toTopic
		if t == "" {
			t = e.Record.OriginalTopic
		}
		if t == "" {
			return fmt.Errorf("dead letter %s has no original topic; name one with --to-topic", e.ID)
		}
		items = append(items, replayItem{id: e.ID, target: t, native: e.Record.Native != nil})
		return nil
	}
	if len(ids) > 0 {
		for _, id := range ids {
			e, err := store.Get(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("%w; nothing replayed", err)
			}
			if err := add(e); err != nil {
				return nil, err
			}
		}
		return items, nil
	}
	page := deadletter.Page{Limit: deadletter.MaxPageLimit}
	for {
		entries, next, err := store.List(ctx, f, page)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if err := add(e); err != nil {
				return nil, err
			}
		}
		if next == "" {
			return items, nil
		}
		page.After = next
	}
}

// runReplay publishes then deletes each item, in order, at most perSecond a second.
func (a *app) runReplay(ctx context.Context, sio stdio, store deadletter.Store, broker brokerurl.Broker, items []replayItem, history deadletter.History, perSecond float64) error {
	limiter := rate.NewLimiter(rate.Inf, 1)
	if perSecond > 0 {
		limiter = rate.NewLimiter(rate.Limit(perSecond), 1)
	}
	bar := newProgress(sio.out, a.isTerminal(sio.out), "replay", len(items), a.now)
	pub := broker.Adapter().Publisher()
	native, _ := broker.(deadletter.NativePublisher)
	checker, _ := broker.(brokerurl.ReplayChecker)
	var replayed, gone int
	var refused []string
	stopped := func(err error) error {
		bar.finish()
		kept := ""
		if len(refused) > 0 {
			kept = fmt.Sprintf(", %d refused and kept (%s)", len(refused), strings.Join(refused, ", "))
		}
		return fmt.Errorf("replay stopped after %d of %d (%d already gone%s): %w; the rest are still in the store", replayed, len(items), gone, kept, err)
	}
	refuse := func(id string, err error) {
		refused = append(refused, id)
		fmt.Fprintf(sio.err, "refused %s, kept in the store: %v\n", id, err)
		bar.add(1)
	}
	for _, it := range items {
		if err := limiter.Wait(ctx); err != nil {
			return stopped(context.Cause(ctx))
		}
		if err := ctx.Err(); err != nil {
			return stopped(err)
		}
		e, err := store.Get(ctx, it.id)
		if errors.Is(err, deadletter.ErrNotFound) {
			gone++ // replayed or purged by someone else since the selection
			bar.add(1)
			continue
		}
		if err != nil {
			return stopped(err)
		}
		if e.Record.Native != nil {
			// Content Payload and Metadata cannot hold (a Redis entry that was not a Watermill
			// message): re-published exactly as it arrived, or refused and kept.
			err := errNoNativeReplay
			if native != nil {
				err = native.PublishNative(ctx, it.target, e.Record)
			}
			if errors.Is(err, deadletter.ErrNotReplayable) {
				refuse(it.id, err)
				continue
			}
			if err != nil {
				return stopped(fmt.Errorf("publish %s to %q: %w", it.id, it.target, err))
			}
		} else {
			msg := deadletter.ReplayMessage(e.Record, history)
			broker.PrepareReplay(e.Record, msg)
			if err := checkReplay(ctx, checker, it.target, e.Record, msg); errors.Is(err, deadletter.ErrNotReplayable) {
				// The broker would refuse this message whatever the retries (an SQS FIFO
				// queue's message without a valid group): kept, and the replay goes on, where
				// the publish's failure would stop it.
				refuse(it.id, err)
				continue
			} else if err != nil {
				return stopped(fmt.Errorf("check %s for %q: %w", it.id, it.target, err))
			}
			if err := pub.Publish(it.target, msg); err != nil {
				return stopped(fmt.Errorf("publish %s to %q: %w", it.id, it.target, err))
			}
		}
		// The message is out: delete its dead letter even if Ctrl-C arrives right now, or the
		// next replay would publish it again.
		delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = store.Delete(delCtx, it.id)
		cancel()
		if err != nil && !errors.Is(err, deadletter.ErrNotFound) {
			replayed++
			return stopped(fmt.Errorf("dead letter %s was re-published but not deleted (a later replay publishes it again): %w", it.id, err))
		}
		replayed++
		bar.add(1)
	}
	bar.finish()
	fmt.Fprintf(sio.out, "replayed %d of %d dead letters (history %s)", replayed, len(items), history)
	if gone > 0 {
		fmt.Fprintf(sio.out, "; %d were already gone", gone)
	}
	fmt.Fprintln(sio.out)
	if len(refused) > 0 {
		return fmt.Errorf("%d dead letters refused and kept in the store (%s): %w", len(refused), strings.Join(refused, ", "), deadletter.ErrNotReplayable)
	}
	return nil
}

// checkStored builds the message a replay would publish from the dead letter it names and asks
// checker about it, publishing nothing: refusal is the checker's deadletter.ErrNotReplayable,
// err any other failure (nothing for a dead letter that is gone since the selection).
func checkStored(ctx context.Context, store deadletter.Store, broker brokerurl.Broker, checker brokerurl.ReplayChecker,
	it replayItem, history deadletter.History) (refusal, err error) {
	e, err := store.Get(ctx, it.id)
	if errors.Is(err, deadletter.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", it.id, err)
	}
	msg := deadletter.ReplayMessage(e.Record, history)
	broker.PrepareReplay(e.Record, msg)
	err = checkReplay(ctx, checker, it.target, e.Record, msg)
	if errors.Is(err, deadletter.ErrNotReplayable) {
		return err, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check %s for %q: %w", it.id, it.target, err)
	}
	return nil, nil
}

// checkReplay asks checker (nil: a broker that does not check) whether it would take msg, made
// from rec, on topic.
func checkReplay(ctx context.Context, checker brokerurl.ReplayChecker, topic string, rec deadletter.Record, msg *message.Message) error {
	if checker == nil {
		return nil
	}
	return checker.CheckReplay(ctx, topic, rec, msg)
}

// errNoNativeReplay is why a record with Native content is refused by a broker that cannot
// re-publish it exactly (it is no deadletter.NativePublisher).
var errNoNativeReplay = fmt.Errorf("%w: its original content is native broker fields (not a whole message), and this broker cannot re-publish them exactly; replay it to the broker it came from", deadletter.ErrNotReplayable)

// isTableStore reports whether a --store URL names the PostgreSQL table store.
func isTableStore(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (strings.EqualFold(u.Scheme, "postgres") || strings.EqualFold(u.Scheme, "postgresql"))
}
