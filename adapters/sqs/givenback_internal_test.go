package sqs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// TestGivenBackBounded: at maxGivenBack messages a new give-back is still counted: entries
// older than givenBackAge go first, else the oldest one; undo and forget take counts back.
func TestGivenBackBounded(t *testing.T) {
	var g givenBack
	for i := range maxGivenBack {
		g.add(fmt.Sprint(i))
	}
	g.mu.Lock()
	g.n["7"] = givenBackEntry{count: 1, last: time.Now().Add(-givenBackAge - time.Minute)} // stale
	g.mu.Unlock()
	g.add("new")
	if g.count("new") != 1 || g.count("7") != 0 || g.len() != maxGivenBack {
		t.Fatalf("at the bound: new %d, stale %d, size %d; want 1, 0 (evicted), %d", g.count("new"), g.count("7"), g.len(), maxGivenBack)
	}
	g.add("newer") // nothing stale: the oldest ("0", the first added) goes
	if g.count("newer") != 1 || g.count("0") != 0 || g.len() != maxGivenBack {
		t.Fatalf("at the bound: newer %d, oldest %d, size %d; want 1, 0, %d", g.count("newer"), g.count("0"), g.len(), maxGivenBack)
	}
	g.add("new")
	g.undo("new")
	if g.count("new") != 1 {
		t.Fatalf("after add and undo: %d, want 1", g.count("new"))
	}
	g.forget("new")
	if g.count("new") != 0 {
		t.Fatal("forget kept the count")
	}
}

// TestGiveBacksNotCountedUnlessRedrive: DecodeAttempt subtracts the receives this adapter gave
// back, except where a RedrivePolicy counts every receive (GiveUpRedrive, or one Provision
// found on the queue).
func TestGiveBacksNotCountedUnlessRedrive(t *testing.T) {
	attempt := func(a *Adapter) int {
		d := &delivery{topic: "t", receiveCount: 3, givenBack: 2}
		msg := message.NewMessage("u", nil)
		msg.SetContext(withDelivery(context.Background(), d))
		return a.DecodeAttempt(msg).Number
	}
	send, err := New(Config{Endpoint: "http://127.0.0.1:1", ProcessingBudget: 50 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if n := attempt(send); n != 1 {
		t.Errorf("GiveUpSend, no RedrivePolicy: attempt %d, want 3 receives - 2 given back = 1", n)
	}
	send.countAll = map[string]bool{"t": true} // as Provision records a RedrivePolicy it kept
	if n := attempt(send); n != 3 {
		t.Errorf("GiveUpSend with a RedrivePolicy: attempt %d, want every receive, 3", n)
	}
	redrive, err := New(Config{Endpoint: "http://127.0.0.1:1", ProcessingBudget: 50 * time.Second, GiveUp: GiveUpRedrive})
	if err != nil {
		t.Fatal(err)
	}
	defer redrive.Close()
	if n := attempt(redrive); n != 3 {
		t.Errorf("GiveUpRedrive: attempt %d, want every receive, 3", n)
	}
}
