package sqs

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DeliverAsOneGroup receives n messages of topic's FIFO queue and hands them out through a
// subscription of a as members of one message group, whatever their SQS groups, as
// deliverGroups does for the members of one group that a receive returned together. Real SQS
// returns several members of a group in one receive; fauxqs returns one per group per receive,
// so the tests send each member in a group of its own and read them as one group here; every
// SQS call (receive, delete, visibility) is real. The channel carries the hand-offs; the
// subscription ends with ctx.
func DeliverAsOneGroup(ctx context.Context, a *Adapter, topic string, n int) (<-chan *message.Message, error) {
	groups := make([]string, n)
	for i := range groups {
		groups[i] = "one-group"
	}
	return DeliverAsGroups(ctx, a, topic, groups)
}

// DeliverAsGroups is DeliverAsOneGroup with the i-th message (in send order) read as a member
// of groups[i].
func DeliverAsGroups(ctx context.Context, a *Adapter, topic string, groups []string) (<-chan *message.Message, error) {
	n := len(groups)
	url, err := a.urls.url(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	sub := newSubscription(a, topic, url, out, n)
	var got []types.Message
	for deadline := time.Now().Add(20 * time.Second); len(got) < n; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("received %d of %d messages", len(got), n)
		}
		res, err := a.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(min(n-len(got), MaxReceiveBatch)), WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameAll,
			},
		})
		if err != nil {
			return nil, err
		}
		got = append(got, res.Messages...)
	}
	batch := make([]waitingMsg, n)
	for i := range got {
		sub.slots <- struct{}{}
		batch[i] = sub.decode(ctx, &got[i], time.Now())
	}
	// Hand out in the order SQS would: the members' send order (their sequence numbers).
	for i := range batch {
		for j := i + 1; j < len(batch); j++ {
			if seq(got[j]) < seq(got[i]) {
				got[i], got[j] = got[j], got[i]
				batch[i], batch[j] = batch[j], batch[i]
			}
		}
	}
	for i := range batch {
		batch[i].d.groupID = groups[i]
	}
	close(sub.pollersDone) // no poller here
	sub.deliverGroups(ctx, batch)
	go func() {
		sub.settling.Wait()
		close(out)
	}()
	return out, nil
}

func seq(m types.Message) string {
	s := m.Attributes[string(types.MessageSystemAttributeNameSequenceNumber)]
	return fmt.Sprintf("%040s", s)
}

// ReceivesCount reports whether every receive of topic's messages counts as an attempt on a
// (see Adapter.receivesCount).
func ReceivesCount(a *Adapter, topic string) bool { return a.receivesCount(topic) }
