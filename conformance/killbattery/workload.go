package killbattery

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// kind is what the battery's handler does with a message. It is written in the payload, so a
// child needs nothing but the message to know it.
type kind string

const (
	kindOK          kind = "ok"           // succeeds
	kindFailOnce    kind = "fail-once"    // Retry on attempt 1, success after
	kindFailForever kind = "fail-forever" // Retry on every attempt: exhausted, dead-lettered
	kindMalformed   kind = "malformed"    // the payload is not JSON: Malformed, dead-lettered at once
)

// mix is the workload's share of each kind, per ten messages.
var mix = [10]kind{kindOK, kindOK, kindOK, kindOK, kindOK, kindOK, kindFailOnce, kindFailOnce, kindFailForever, kindMalformed}

// metadataKey is set on every message; a dead letter must keep it.
const metadataKey, metadataValue = "x-killbattery", "kept"

// payload is the body of a well-formed message. Text carries non-ASCII characters so that the
// byte-for-byte check of dead letters means something beyond ASCII.
type payload struct {
	Kind kind   `json:"kind"`
	N    int    `json:"n"`
	Text string `json:"text"`
}

// work is one published message and what the battery expects of it.
type work struct {
	uuid    string
	kind    kind
	payload []byte
}

// newWorkload returns n messages in an order drawn from rng, so that every batch mixes kinds.
func newWorkload(n int, rng *rand.Rand) []work {
	out := make([]work, n)
	for i, p := range rng.Perm(n) {
		k := mix[p%len(mix)]
		body, err := json.Marshal(payload{Kind: k, N: i, Text: fmt.Sprintf("naïve café ✓ %d", i)})
		if err != nil {
			panic(err) // a struct of strings and ints always marshals
		}
		if k == kindMalformed {
			body = body[:len(body)-2] // cut inside the last string: invalid JSON
		}
		out[i] = work{uuid: watermill.NewUUID(), kind: k, payload: body}
	}
	return out
}

// message returns a fresh Watermill message for w.
func (w work) message() *message.Message {
	m := message.NewMessage(w.uuid, append([]byte(nil), w.payload...))
	m.Metadata.Set(metadataKey, metadataValue)
	return m
}

// expectedCalls is how many handler calls w gets when nothing crashes.
func (w work) expectedCalls(maxAttempts int) int {
	switch w.kind {
	case kindFailOnce:
		return 2
	case kindFailForever:
		return maxAttempts
	default:
		return 1
	}
}

// batches splits ws into n nearly equal consecutive parts: the battery publishes one before
// each child starts, so that every kill finds fresh work in flight.
func batches(ws []work, n int) [][]work {
	out := make([][]work, n)
	for i := range n {
		out[i] = ws[i*len(ws)/n : (i+1)*len(ws)/n]
	}
	return out
}
