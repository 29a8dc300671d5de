package sqs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
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

// TestGiveBacksNotCountedUnlessRedrive: a message received with receives this adapter gave back
// reads as an attempt without them, except where a RedrivePolicy counts every receive
// (GiveUpRedrive, or one Provision kept on the queue).
func TestGiveBacksNotCountedUnlessRedrive(t *testing.T) {
	attempt := func(a *Adapter) int {
		a.givenBack.forget("id")
		a.givenBack.add("id")
		a.givenBack.add("id")
		sub := &subscription{a: a, topic: "t", url: "http://127.0.0.1:1/q"}
		w := sub.decode(context.Background(), &types.Message{MessageId: aws.String("id"), ReceiptHandle: aws.String("r"), Body: aws.String("x"),
			Attributes: map[string]string{string(types.MessageSystemAttributeNameApproximateReceiveCount): "3"}}, time.Now())
		return a.DecodeAttempt(w.msg).Number
	}
	send, err := New(Config{Endpoint: "http://127.0.0.1:1", ProcessingBudget: 50 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if n := attempt(send); n != 1 {
		t.Errorf("GiveUpSend, no RedrivePolicy: attempt %d, want 3 receives - 2 given back = 1", n)
	}
	send.redrive["t"] = 3 // as Provision records a RedrivePolicy it kept
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
