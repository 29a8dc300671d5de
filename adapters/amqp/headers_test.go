package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
)

// TestMarshalerTextForms: every AMQP header type becomes metadata in a fixed text form, where
// watermill-amqp's DefaultMarshaler fails the whole delivery.
func TestMarshalerTextForms(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 0, time.FixedZone("X", 3600))
	d := amqp091.Delivery{
		Body:        []byte("body"),
		RoutingKey:  "hub.x",
		Exchange:    "hub",
		MessageId:   "mid-1",
		ContentType: "application/json",
		Headers: amqp091.Table{
			"s": "text", "b": true, "i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16),
			"i32": int32(-32), "u32": uint32(32), "i64": int64(-64), "f32": float32(1.5), "f64": 2.25,
			"nan": math.NaN(), "dec": amqp091.Decimal{Scale: 2, Value: -12345}, "ts": ts, "bytes": []byte{0, 255},
			"void": nil, "table": amqp091.Table{"z": int64(1), "a": []any{"x", math.Inf(1), []byte("hi")}},
			"arr": []any{int32(1), "two", amqp091.Table{"k": ts}},
		},
	}
	msg, err := amqp.Marshaler{}.Unmarshal(d)
	if err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	want := map[string]string{
		"s": "text", "b": "true", "i8": "-8", "u8": "8", "i16": "-16", "u16": "16", "i32": "-32", "u32": "32",
		"i64": "-64", "f32": "1.5", "f64": "2.25", "nan": "NaN", "dec": "-123.45", "ts": "2024-05-06T06:08:09Z",
		"bytes": "AP8=", "void": "", "table": `{"a":["x","+Inf","aGk="],"z":1}`, "arr": `[1,"two",{"k":"2024-05-06T06:08:09Z"}]`,
		amqp.MetadataRoutingKey: "hub.x", amqp.MetadataDeliveryRoutingKey: "hub.x", amqp.MetadataExchange: "hub",
		amqp.MetadataContentType: "application/json",
	}
	for k, v := range want {
		if got, ok := msg.Metadata[k]; !ok || got != v {
			t.Errorf("metadata %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if msg.UUID != "mid-1" {
		t.Errorf("UUID %q, want the message-id mid-1", msg.UUID)
	}
	for k := range msg.Metadata {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected metadata key %q", k)
		}
	}
}

// TestMarshalerRoundTrip: metadata survives Marshal/Unmarshal; broker-owned and delivery-only
// keys are never published as headers.
func TestMarshalerRoundTrip(t *testing.T) {
	msg := message.NewMessage("uuid-1", []byte{0, 1, 2})
	msg.Metadata.Set("k", "v")
	msg.Metadata.Set("x-death", `[{"count":3}]`)
	msg.Metadata.Set("x-first-death-queue", "q")
	msg.Metadata.Set("x-delivery-count", "2")
	msg.Metadata.Set(amqp.MetadataExchange, "old")
	msg.Metadata.Set(amqp.MetadataCorrelationID, "corr")
	pub, err := amqp.Marshaler{}.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x-death", "x-first-death-queue", "x-delivery-count", amqp.MetadataExchange, amqp.MetadataCorrelationID} {
		if _, ok := pub.Headers[k]; ok {
			t.Errorf("header %s was published", k)
		}
	}
	if pub.CorrelationId != "corr" || pub.MessageId != "uuid-1" || pub.DeliveryMode != amqp091.Persistent || pub.Headers["k"] != "v" {
		t.Errorf("publishing %+v", pub)
	}
	back, _ := amqp.Marshaler{}.Unmarshal(amqp091.Delivery{Headers: pub.Headers, Body: pub.Body, CorrelationId: pub.CorrelationId})
	if back.UUID != "uuid-1" || back.Metadata.Get("k") != "v" || back.Metadata.Get(amqp.MetadataCorrelationID) != "corr" {
		t.Errorf("round trip: %s %v", back.UUID, back.Metadata)
	}
}

// TestForeignHeadersReachHandler: a message from another producer with integer, table, array,
// timestamp and byte headers is handled (and retried through x-death) like any other.
func TestForeignHeadersReachHandler(t *testing.T) {
	ctx := context.Background()
	topic := uniqueTopic("foreign")
	a := newAdapter(ctx, t, amqp.Config{})
	var rec recorder
	runRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(200 * time.Millisecond)}, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		rec.add(msg, at)
		if at.Number == 1 {
			return errors.New("fail once")
		}
		return nil
	})
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	err = ch.PublishWithContext(ctx, topic, "foreign.key", false, false, amqp091.Publishing{
		Body: []byte("raw"),
		Headers: amqp091.Table{
			"retries": int32(7), "meta": amqp091.Table{"tenant": "t1", "n": int64(2)},
			"tags": []any{"a", int16(3)}, "sent": time.Unix(1700000000, 0), "blob": []byte("xyz"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "2 attempts", func() bool { return len(rec.snapshot()) >= 2 })
	calls := rec.snapshot()
	for i, c := range calls {
		md := c.metadata
		if md.Get("retries") != "7" || md.Get("meta") != `{"n":2,"tenant":"t1"}` || md.Get("tags") != `["a",3]` ||
			md.Get("sent") != "2023-11-14T22:13:20Z" || md.Get("blob") != "eHl6" {
			t.Errorf("call %d: metadata %v", i, md)
		}
		if c.attempt.Number != i+1 || c.attempt.OriginalKey != "foreign.key" {
			t.Errorf("call %d: attempt %d key %q", i, c.attempt.Number, c.attempt.OriginalKey)
		}
	}
	var deaths []map[string]any
	if err := json.Unmarshal([]byte(calls[1].metadata.Get("x-death")), &deaths); err != nil || len(deaths) == 0 {
		t.Fatalf("x-death metadata %q is not a JSON array: %v", calls[1].metadata.Get("x-death"), err)
	}
}

// TestCheckDeliveryMakesMalformed: a delivery Config.CheckDelivery refuses is dead-lettered as
// Malformed with its bytes intact, and the handler never sees it.
func TestCheckDeliveryMakesMalformed(t *testing.T) {
	ctx := context.Background()
	topic := uniqueTopic("malformed")
	a := newAdapter(ctx, t, amqp.Config{CheckDelivery: func(d amqp091.Delivery) error {
		if !json.Valid(d.Body) {
			return errors.New("body is not JSON")
		}
		return nil
	}})
	dlq := watchDLQ(t, a, topic)
	var rec recorder
	runRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(200 * time.Millisecond)}, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		rec.add(msg, at)
		return nil
	})
	bad := publishKey(t, a, topic, topic, "{broken")
	good := publishKey(t, a, topic, topic, `{"ok":true}`)
	waitFor(t, 30*time.Second, "dead letter and handled message", func() bool { return len(dlq()) >= 1 && len(rec.snapshot()) >= 1 })
	time.Sleep(500 * time.Millisecond)
	recs, calls := dlq(), rec.snapshot()
	if len(recs) != 1 || len(calls) != 1 {
		t.Fatalf("want 1 dead letter and 1 call, got %d and %d", len(recs), len(calls))
	}
	if r := recs[0]; r.Reason != deadletter.Malformed || string(r.Payload) != "{broken" || r.UUID != bad.UUID || r.LastError != "body is not JSON" {
		t.Errorf("dead letter %+v", r)
	}
	if calls[0].uuid != good.UUID {
		t.Errorf("handler saw %s, want only %s", calls[0].uuid, good.UUID)
	}
}
