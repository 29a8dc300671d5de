package amqp_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
)

// TestTypedHeadersShownAndNative: a dead letter as adapters/amqp writes it for a foreign
// producer's message (typed headers kept, a foreign millrace-dlq-* header escaped, the broker's
// x-death kept) is shown with every header in Metadata (text form), the foreign key under its
// own name, and the typed headers in Record.Native with their AMQP type and exact encoding; the
// dead-letter history, the producer's or millrace's, is not content and stays out of Native.
func TestTypedHeadersShownAndNative(t *testing.T) {
	ctx := context.Background()
	conn := dial(t)
	q := declare(t, conn)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	rec := deadletter.Record{UUID: "u-1", Reason: deadletter.Exhausted, Attempts: 3, OriginalTopic: "orders", Broker: "amqp",
		LastFailureAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := amqp091.Table{
		"retries": int32(7),
		"blob":    []byte{0, 0xff},
		"meta":    amqp091.Table{"n": int64(2)},
		"tenant":  "t-1",
		deadletter.EscapePrefix + "millrace-dlq-reason": "forged",
		"x-death": []any{amqp091.Table{"count": int64(1), "queue": "orders", "reason": "rejected"}},
		// The history millrace's retries collected: retry state, shown, never content.
		amqp.HeaderHistoryPrefix + "x-death": []any{amqp091.Table{"count": int64(2), "queue": "orders.retry", "reason": "expired"}},
	}
	for k, v := range rec.Fields() {
		h[k] = v
	}
	body := []byte{0, 1, 2, 0xfe}
	if err := ch.PublishWithContext(ctx, "", q, true, false, amqp091.Publishing{Headers: h, Body: body, MessageId: "u-1",
		Timestamp: time.Unix(1600000000, 0)}); err != nil {
		t.Fatal(err)
	}
	s, err := amqp.NewDeadLetterStore(conn, q, amqp.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var entries []deadletter.Entry
	for range 100 {
		if entries, _, err = s.List(ctx, deadletter.Filter{}, deadletter.Page{Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
	e := entries[0]
	r := e.Record
	if string(r.Payload) != string(body) || r.Reason != deadletter.Exhausted || !e.StoredAt.Equal(rec.LastFailureAt) {
		t.Errorf("record %+v stored at %s", r, e.StoredAt)
	}
	wantMD := map[string]string{"retries": "7", "blob": "AP8=", "meta": `{"n":2}`, "tenant": "t-1", "millrace-dlq-reason": "forged"}
	for k, v := range wantMD {
		if r.Metadata[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, r.Metadata[k], v)
		}
	}
	if r.Metadata["x-death"] == "" || r.Metadata[amqp.HeaderHistoryPrefix+"x-death"] == "" {
		t.Error("x-death or millrace's retry history not shown")
	}
	want := []deadletter.Field{
		{Name: "blob", Type: "x", Value: []byte{0, 0, 0, 2, 0, 0xff}},
		{Name: "meta", Type: "F", Value: append([]byte{0, 0, 0, 11, 1, 'n', 'l'}, 0, 0, 0, 0, 0, 0, 0, 2)},
		{Name: "retries", Type: "I", Value: []byte{0, 0, 0, 7}},
	}
	if len(r.Native) != len(want) {
		t.Fatalf("Native %+v, want %+v", r.Native, want)
	}
	for i := range want {
		if r.Native[i].Name != want[i].Name || r.Native[i].Type != want[i].Type || string(r.Native[i].Value) != string(want[i].Value) {
			t.Errorf("Native[%d] = %+v, want %+v", i, r.Native[i], want[i])
		}
	}
}
