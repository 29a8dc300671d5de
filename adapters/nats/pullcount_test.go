package nats

import (
	"math"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// delivery of the counter's consumer (stream S, consumer C) on sub, stream sequence seq.
func testDelivery(sub *nats.Subscription, seq int) *nats.Msg {
	return &nats.Msg{Subject: "s", Sub: sub, Data: []byte("x"), Header: nats.Header{},
		Reply: "$JS.ACK.S.C.1." + strconv.Itoa(seq) + "." + strconv.Itoa(seq) + ".1700000000000000000.0"}
}

func testStatus(sub *nats.Subscription, code, desc, pending string) *nats.Msg {
	h := nats.Header{"Status": {code}}
	if desc != "" {
		h.Set("Description", desc)
	}
	if pending != "" {
		h.Set("Nats-Pending-Messages", pending)
		h.Set("Nats-Pending-Bytes", "0")
	}
	return &nats.Msg{Subject: "inbox", Sub: sub, Header: h}
}

// TestPullCounterWindow: a request asks for the rest of the window when the open requests plus
// the queue fall below half of it; deliveries and a request's end take off what they settle.
func TestPullCounterWindow(t *testing.T) {
	cur := &nats.Subscription{}
	c := newPullCounter(8, "S", "C")
	c.reset(cur)
	if n := c.want(0); n != 8 {
		t.Fatalf("want(0) = %d, want 8", n)
	}
	c.sent(8)
	for i := range 4 {
		if k := c.arrive(testDelivery(cur, i+1)); k != arriveDelivery {
			t.Fatalf("delivery %d: %v", i+1, k)
		}
	}
	// 4 open, 4 queued: nothing to ask for.
	if n := c.want(4); n != 0 {
		t.Fatalf("want(4) with 4 open = %d, want 0", n)
	}
	// 4 open, 0 queued (handed out): still half the window.
	if n := c.want(0); n != 0 {
		t.Fatalf("want(0) with 4 open = %d, want 0", n)
	}
	// One more delivery handed out: 3 open, below half: ask for 5.
	c.arrive(testDelivery(cur, 5))
	if n := c.want(0); n != 5 {
		t.Fatalf("want(0) with 3 open = %d, want 5", n)
	}
	c.sent(5)
	if c.asked != 8 {
		t.Fatalf("asked %d, want 8", c.asked)
	}
	// 100 heartbeats carry the pending count of one request: they change nothing.
	for range 100 {
		if k := c.arrive(testStatus(cur, "100", "Idle Heartbeat", "3")); k != arriveHeartbeat {
			t.Fatalf("heartbeat: %v", k)
		}
	}
	if c.asked != 8 {
		t.Fatalf("asked %d after 100 heartbeats, want 8", c.asked)
	}
	// The first request expires with 3 left, the second ends (409 size limit) with 5 left.
	if k := c.arrive(testStatus(cur, "408", "Request Timeout", "3")); k != arriveEnded || c.asked != 5 {
		t.Fatalf("408 with 3 left: %v, asked %d, want arriveEnded, 5", k, c.asked)
	}
	if k := c.arrive(testStatus(cur, "409", "Message Size Exceeds MaxBytes", "5")); k != arriveEnded || c.asked != 0 {
		t.Fatalf("409 with 5 left: %v, asked %d, want arriveEnded, 0", k, c.asked)
	}
	if c.open() {
		t.Fatal("open with nothing asked")
	}
	// A count larger than what is open never goes below zero.
	c.sent(2)
	c.arrive(testStatus(cur, "408", "Request Timeout", "1000"))
	if c.asked != 0 {
		t.Fatalf("asked %d after a 408 for more than was open, want 0", c.asked)
	}
}

// TestPullCounterStatuses: statuses without a count, the consumer's disappearance, a 404.
func TestPullCounterStatuses(t *testing.T) {
	cur := &nats.Subscription{}
	c := newPullCounter(4, "S", "C")
	c.reset(cur)
	c.sent(4)
	cases := []struct {
		m    *nats.Msg
		want arrival
	}{
		{testStatus(cur, "409", "Exceeded MaxWaiting", ""), arriveRefused},
		{testStatus(cur, "409", "Exceeded MaxRequestBatch of 2", ""), arriveRefused},
		{testStatus(cur, "400", "Bad Request", ""), arriveRefused},
		{testStatus(cur, "408", "Request Timeout", ""), arriveRefused}, // no count: unknown
		{testStatus(cur, "408", "Request Timeout", "x"), arriveRefused},
		{testStatus(cur, "409", "Consumer Deleted", ""), arriveConsumerGone},
		{testStatus(cur, "409", "Consumer Deleted", "4"), arriveConsumerGone},
		{testStatus(cur, "503", "", ""), arriveConsumerGone},
		{testStatus(cur, "404", "No Messages", ""), arriveNoMessages},
	}
	for _, tc := range cases {
		if k := c.arrive(tc.m); k != tc.want {
			t.Errorf("%s %s (pending %q): %v, want %v", tc.m.Header.Get("Status"), tc.m.Header.Get("Description"),
				tc.m.Header.Get("Nats-Pending-Messages"), k, tc.want)
		}
	}
	if c.asked != 4 {
		t.Errorf("asked %d, want 4: a status without a count takes nothing off", c.asked)
	}
}

// TestPullCounterOldInbox: after a reset, what requests on the old inbox deliver is handed out
// (arriveOldDelivery) but not counted, and their statuses, a 408 that gives back their whole
// batch included, are ignored; the new inbox's request stays counted, so no third request goes
// out while it is open and the queue never needs more than the window.
func TestPullCounterOldInbox(t *testing.T) {
	const w = 8
	oldSub, newSub := &nats.Subscription{}, &nats.Subscription{}
	c := newPullCounter(w, "S", "C")
	c.reset(oldSub)
	c.sent(c.want(0))
	c.reset(newSub) // a reconnect, the idle watchdog or a refusal
	if n := c.want(0); n != w {
		t.Fatalf("want after reset = %d, want %d", n, w)
	}
	c.sent(w)
	queued := 0
	for i := range w { // the old request delivers its whole batch
		if k := c.arrive(testDelivery(oldSub, i+1)); k != arriveOldDelivery {
			t.Fatalf("old delivery: %v", k)
		}
		queued++
	}
	if c.asked != w {
		t.Fatalf("asked %d after the old inbox's deliveries, want %d", c.asked, w)
	}
	for _, m := range []*nats.Msg{testStatus(oldSub, "408", "Request Timeout", "8"), testStatus(oldSub, "100", "Idle Heartbeat", "0"),
		testStatus(oldSub, "409", "Consumer Deleted", ""), testStatus(oldSub, "409", "Exceeded MaxWaiting", "")} {
		if k := c.arrive(m); k != arriveStale {
			t.Fatalf("old inbox status %s: %v, want arriveStale", m.Header.Get("Status"), k)
		}
	}
	if c.asked != w {
		t.Fatalf("asked %d after the old inbox's statuses, want %d", c.asked, w)
	}
	// All handed out: the new request is still open with w to deliver; nothing more is asked.
	if n := c.want(0); n != 0 {
		t.Fatalf("want(0) with the new request open = %d, want 0 (a third request)", n)
	}
	// The new request delivers; only now does the count fall.
	for i := range w {
		if k := c.arrive(testDelivery(newSub, 100+i)); k != arriveDelivery {
			t.Fatalf("new delivery: %v", k)
		}
	}
	if c.asked != 0 || c.want(0) != w {
		t.Fatalf("asked %d, want(0) %d after the new request delivered, want 0 and %d", c.asked, c.want(0), w)
	}
}

// TestPullCounterForged: a message on the inbox that is not a delivery of the counter's
// consumer (no reply, a reply naming another stream or consumer, not an ack subject) is
// arriveForged and takes nothing off.
func TestPullCounterForged(t *testing.T) {
	cur := &nats.Subscription{}
	c := newPullCounter(4, "S", "C")
	c.reset(cur)
	c.sent(4)
	for _, reply := range []string{"", "$JS.ACK.other.C.1.1.1.1700000000000000000.0", "$JS.ACK.S.other.1.1.1.1700000000000000000.0",
		"_INBOX.x", "$JS.ACK.S.C"} {
		m := &nats.Msg{Subject: "inbox", Sub: cur, Reply: reply, Data: []byte("forged"), Header: nats.Header{}}
		if k := c.arrive(m); k != arriveForged {
			t.Errorf("reply %q: %v, want arriveForged", reply, k)
		}
	}
	if c.asked != 4 {
		t.Errorf("asked %d after forged messages, want 4", c.asked)
	}
	if k := c.arrive(testDelivery(cur, 1)); k != arriveDelivery {
		t.Errorf("a real delivery: %v", k)
	}
}

// TestPullCounterBounds: the window saturates and the counts never overflow.
func TestPullCounterBounds(t *testing.T) {
	c := newPullCounter(1, "S", "C")
	cur := &nats.Subscription{}
	c.reset(cur)
	if n := c.want(0); n != 1 {
		t.Fatalf("window 1: want(0) = %d", n)
	}
	c.sent(1)
	if n := c.want(0); n != 0 {
		t.Fatalf("window 1 with one open: want(0) = %d", n)
	}
	c.arrive(testDelivery(cur, 1))
	if n := c.want(1); n != 0 {
		t.Fatalf("window 1 with one queued: want(1) = %d", n)
	}
	if n := c.want(5); n != 0 {
		t.Fatalf("queue beyond the window: want(5) = %d", n)
	}
	c.sent(math.MaxInt)
	c.sent(math.MaxInt)
	if c.asked != math.MaxInt {
		t.Fatalf("asked %d, want it saturated", c.asked)
	}
}
