package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	awstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// fifoSuffix ends the name of every FIFO queue (an SQS rule), and so every FIFO topic.
const fifoSuffix = ".fifo"

// Metadata keys that a message published to a FIFO queue carries its SQS send fields in. On a
// standard queue they are plain metadata. Both travel as metadata as well, so a message read
// back (and its dead letter) still has them.
const (
	// MetadataGroupID is the metadata key whose value is the MessageGroupId of a message
	// published to a FIFO queue (a topic ending in ".fifo"): SQS hands out the messages of one
	// group in the order they were sent, one group member at a time. Required on a FIFO queue:
	// a message without it, or with a value SQS refuses (1 to 128 characters, each a letter, a
	// digit or ASCII punctuation), is refused with ErrMessageGroup before anything is sent.
	MetadataGroupID = "millrace-sqs-group-id"
	// MetadataDeduplicationID is the metadata key whose value is the MessageDeduplicationId of a
	// message published to a FIFO queue: SQS accepts a second message with the same ID within 5
	// minutes but does not deliver it. Optional: the default is the message UUID, so publishing
	// the same Watermill message again within 5 minutes (a publish retried after a timeout)
	// delivers it once. The same rule as for MetadataGroupID applies to its value.
	MetadataDeduplicationID = "millrace-sqs-deduplication-id"
)

// ErrMessageGroup is returned by the publisher for a message to a FIFO queue without a valid
// message group (Config.MessageGroup, or else MetadataGroupID) or with an invalid
// MetadataDeduplicationID; nothing is sent for it.
var ErrMessageGroup = errors.New("millrace sqs: a message for a FIFO queue needs a valid message group ID " +
	"(1 to 128 letters, digits or ASCII punctuation)")

// System attribute names under which marshal hands the FIFO send fields to sendInput (a
// marshaled message's Attributes are otherwise only filled on receive).
const (
	sendGroupField = string(awstypes.MessageSystemAttributeNameMessageGroupId)
	sendDedupField = string(awstypes.MessageSystemAttributeNameMessageDeduplicationId)
)

// isFIFOQueue reports whether a queue name or URL is a FIFO queue's.
func isFIFOQueue(nameOrURL string) bool { return strings.HasSuffix(nameOrURL, fifoSuffix) }

// validFIFOID reports whether s is a valid MessageGroupId or MessageDeduplicationId: 1 to 128
// characters, each alphanumeric or ASCII punctuation (SQS's rule).
func validFIFOID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// fifoFields returns the FIFO send fields of msg, for marshal to carry to sendInput: its group
// from group (Config.MessageGroup; nil: metadata MetadataGroupID) and its deduplication ID.
func fifoFields(msg *message.Message, group func(*message.Message) string) map[string]string {
	dedup := msg.Metadata.Get(MetadataDeduplicationID)
	if dedup == "" {
		dedup = msg.UUID
	}
	g := msg.Metadata.Get(MetadataGroupID)
	if group != nil {
		g = group(msg)
	}
	return map[string]string{sendGroupField: g, sendDedupField: dedup}
}

// sendInput is the publisher's GenerateSendMessageInput: watermill-aws's, plus MessageGroupId
// and MessageDeduplicationId on a FIFO queue, refused with ErrMessageGroup when not valid.
func sendInput(ctx context.Context, queueURL wmsqs.QueueURL, m *awstypes.Message) (*awssqs.SendMessageInput, error) {
	in, err := wmsqs.GenerateSendMessageInputDefault(ctx, queueURL, m)
	if err != nil || !isFIFOQueue(string(queueURL)) {
		return in, err
	}
	group, dedup := m.Attributes[sendGroupField], m.Attributes[sendDedupField]
	if !validFIFOID(group) {
		return nil, fmt.Errorf("%w: queue %s: the group is %q (Config.MessageGroup, or else metadata %s)",
			ErrMessageGroup, queueURL, clip(group), MetadataGroupID)
	}
	if !validFIFOID(dedup) {
		return nil, fmt.Errorf("%w: queue %s: deduplication ID %q (metadata %s, or the message UUID) is not valid",
			ErrMessageGroup, queueURL, clip(dedup), MetadataDeduplicationID)
	}
	in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(dedup)
	return in, nil
}

// deliverGroups hands the messages of one receive from a FIFO queue to the consumer keeping each
// message group's order: the groups run in parallel, the messages of one group one after the
// other, the next only once the one before is done with (acked and deleted, or left to the
// RedrivePolicy). SQS hands out the messages of a group in order and no more of the group while
// one is in flight, so only the members of one receive need this. When a message is not done
// with (nacked: a retry hides it for its delay, a failure for the visibility timeout; or its
// delete failed), the later messages of its group in the receive are given back unhandled
// (ChangeMessageVisibility 0), so that SQS hands them out again after it: as for AWS Lambda's
// FIFO batches, SQS counts their receive, one attempt each.
func (sub *subscription) deliverGroups(ctx context.Context, batch []waitingMsg) {
	var order []string
	groups := map[string][]waitingMsg{}
	for _, r := range batch {
		g := r.d.groupID
		if _, seen := groups[g]; !seen {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range order {
		go sub.runGroup(ctx, groups[g])
	}
}

// runGroup hands out the messages of one group of a receive in order (see deliverGroups). Once
// the subscription is ending it hands out no later member: those are given back when no poller
// of the subscription can receive them again.
func (sub *subscription) runGroup(ctx context.Context, msgs []waitingMsg) {
	var handOffEnd time.Time // set once ctx has ended: the last moment to hand out this group
	for i, r := range msgs {
		if (i > 0 && ctx.Err() != nil) || !sub.handOff(ctx, msgs[i:], &handOffEnd) {
			<-sub.pollersDone
			sub.giveBackAll(ctx, msgs[i:])
			return
		}
		sub.startExtension(ctx, r.d)
		rest := msgs[i+1:]
		released := false // settle and this goroutine are one: no lock needed
		release := func() {
			if released {
				return
			}
			released = true
			if ctx.Err() != nil {
				<-sub.pollersDone
			}
			sub.giveBackAll(ctx, rest)
		}
		done := sub.settle(ctx, r.msg, r.d, rest, release)
		r.cancel()
		sub.release(1)
		sub.settling.Done()
		if !done || released {
			release()
			return
		}
	}
}

// giveBackAll gives back messages of a receive that were not handed out (one batch call), then
// frees their places in the Window.
func (sub *subscription) giveBackAll(ctx context.Context, msgs []waitingMsg) {
	var wg sync.WaitGroup
	for _, r := range msgs {
		close(r.d.extended)
		r.cancel()
		wg.Go(func() { sub.giveBack(ctx, &r.d.receipt, r.d.messageID) })
	}
	wg.Wait()
	for range msgs {
		sub.release(1)
		sub.settling.Done()
	}
}
