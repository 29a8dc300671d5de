package sqs_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
)

// The harness is a foreign producer for the hostile-input battery (conformance.Foreign): it
// sends messages with the SDK's SendMessage, typed attributes exactly as given, and reads the
// dead-letter queue back with ReceiveMessage at visibility 0, which leaves every message in
// place.

var _ conformance.Foreign = harness{}

// attr builds message attributes from (name, type, value) triples; a Binary type's value is
// the BinaryValue, any other the StringValue.
func attr(ntv ...string) map[string]types.MessageAttributeValue {
	out := map[string]types.MessageAttributeValue{}
	for i := 0; i+2 < len(ntv); i += 3 {
		name, typ, v := ntv[i], ntv[i+1], ntv[i+2]
		if strings.HasPrefix(typ, "Binary") {
			out[name] = types.MessageAttributeValue{DataType: aws.String(typ), BinaryValue: []byte(v)}
		} else {
			out[name] = types.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(v)}
		}
	}
	return out
}

// attrContent is a message's Content: the body, and the attributes sorted by name, each typed
// with its SQS data type, its value the StringValue bytes or the BinaryValue.
func attrContent(body string, attrs map[string]types.MessageAttributeValue) conformance.Content {
	c := conformance.Content{Body: []byte(body)}
	for name, v := range attrs {
		f := deadletter.Field{Name: name, Type: aws.ToString(v.DataType)}
		if v.StringValue != nil {
			f.Value = []byte(*v.StringValue)
		} else {
			f.Value = bytes.Clone(v.BinaryValue)
		}
		c.Fields = append(c.Fields, f)
	}
	slices.SortFunc(c.Fields, func(a, b deadletter.Field) int { return strings.Compare(a.Name, b.Name) })
	return c
}

func sqsCase(name string, kinds []conformance.Kind, body string, attrs map[string]types.MessageAttributeValue) conformance.ForeignCase {
	return conformance.ForeignCase{Name: name, Kinds: kinds,
		Publish: func(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) (conformance.Content, error) {
			a := am.(*sqs.Adapter)
			url, err := a.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(a.QueueName(topic))})
			if err != nil {
				return conformance.Content{}, err
			}
			in := &awssqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String(body), MessageAttributes: attrs}
			if strings.HasSuffix(aws.ToString(url.QueueUrl), ".fifo") { // send fields of a FIFO queue, not content
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("foreign"), aws.String(watermill.NewUUID())
			}
			_, err = a.Client().SendMessage(ctx, in)
			return attrContent(body, attrs), err
		}}
}

// sqsMaxMessageSize is SQS's MaximumMessageSize default for the queues the adapter creates
// (256 KiB): body, attribute names, data types and values together.
const sqsMaxMessageSize = 256 * 1024

// ForeignCases: millrace's attempt headers forged as attributes (the receive count is SQS's
// and no producer can touch it), in String, Number and Binary types; Spring's
// retry_topic-attempts as Binary of the wrong width; forged millrace-dlq-* names; a packing
// attribute of the wrong type, not JSON, colliding with an attribute of its own, or an empty
// object; typed attributes; a message without attributes;
// binary attribute values; a message at the size limit.
func (harness) ForeignCases() []conformance.ForeignCase {
	k := func(ks ...conformance.Kind) []conformance.Kind { return ks }
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	const maxInt64 = "9223372036854775807"
	big := strings.Repeat("b", sqsMaxMessageSize-len("x-app")-len("String")-len("kept")-len(millrace.HeaderAttempt)-len("Number")-len("2"))
	return []conformance.ForeignCase{
		sqsCase("millrace-attempt 2^63-1 (String and Number)", k(conformance.KindOverflow, conformance.KindForgedKeys), "o",
			attr(millrace.HeaderAttempt, "String", maxInt64, "n", "Number", maxInt64, "x-app", "String", "kept")),
		sqsCase("millrace-attempt -5 (Number)", k(conformance.KindNegative), "n",
			attr(millrace.HeaderAttempt, "Number", "-5")),
		sqsCase("millrace-attempt 0", k(conformance.KindZero), "z",
			attr(millrace.HeaderAttempt, "String", "0", "retry_topic-attempts", "Binary", "\x00\x00\x00\x00")),
		sqsCase("millrace-attempt 10^23 (Number 1E+23)", k(conformance.KindHuge), "h",
			attr(millrace.HeaderAttempt, "String", "99999999999999999999999", "n", "Number", "1E+23")),
		sqsCase("millrace-attempt text", k(conformance.KindNonNumeric), "t",
			attr(millrace.HeaderAttempt, "String", "two")),
		sqsCase("millrace-attempt as Binary, retry_topic-attempts of 8 bytes", k(conformance.KindWrongType), "w",
			attr(millrace.HeaderAttempt, "Binary", "\x00\x00\x00\x02", "retry_topic-attempts", "Binary", "\x00\x00\x00\x00\x00\x00\x00\x02")),
		sqsCase("packing attribute millrace-metadata as Binary", k(conformance.KindWrongType), "w",
			attr(sqs.AttrMetadata, "Binary", "\xde\xad\x00\xbe\xef", "x-app", "String", "kept")),
		sqsCase("packing attribute millrace-metadata not JSON", k(conformance.KindWrongType), "w",
			attr(sqs.AttrMetadata, "String", "{not json", "x-app", "String", "kept")),
		sqsCase("packed millrace-metadata colliding with an attribute of its own", k(conformance.KindForgedKeys), "c",
			attr("x", "String", "1", sqs.AttrMetadata, "String", `{"x":"2"}`)),
		sqsCase("packing attribute millrace-metadata-types of an empty object", k(conformance.KindWrongType), "e",
			attr(sqs.AttrMetadataTypes, "String", `{}`, "x-app", "String", "kept")),
		sqsCase("typed attributes: Number, Binary, String.custom, Binary.custom", k(conformance.KindWrongType), "typed",
			attr("n", "Number", "42.50", "b", "Binary", "utf8 bytes", "j", "String.json", `{"a":1}`, "p", "Binary.png", "\x89PNG\x00")),
		sqsCase("no attributes at all (no UUID, no metadata)", k(conformance.KindMissing), "m", nil),
		sqsCase("record keys forged", k(conformance.KindForgedKeys), "f",
			attr(deadletter.KeyReason, "String", "discarded", deadletter.KeyAttempts, "Number", "-3", deadletter.EscapePrefix+"x", "String", "y",
				deadletter.KeyMessageUUID, "String", "forged", sqs.KeyTrimmed, "String", "forged", millrace.HeaderLastError, "String", "forged error",
				millrace.HeaderOriginalTopic, "String", "elsewhere")),
		sqsCase("ten attributes, the most SQS allows", k(conformance.KindForgedKeys), "ten",
			attr("a0", "String", "0", "a1", "Number", "1", "a2", "Binary", "\x02", "a3", "String.x", "3", "a4", "String", "4",
				"a5", "String", "5", "a6", "String", "6", "a7", "String", "7", millrace.HeaderAttempt, "String", "1", deadletter.KeyReason, "String", "discarded")),
		sqsCase("Binary attributes of every byte value", k(conformance.KindBinaryPayload), "binary attributes",
			attr("bin", "Binary", string(binary), "nul", "Binary", "\x00")),
		sqsCase("message at the 256 KiB limit (body and attributes)", k(conformance.KindSizeLimit), big,
			attr("x-app", "String", "kept", millrace.HeaderAttempt, "Number", "2")),
	}
}

// NotApplicable: what SQS refuses before any consumer sees it.
func (harness) NotApplicable() map[conformance.Kind]string {
	return map[conformance.Kind]string{
		conformance.KindBinaryPayload: "an SQS body is XML-safe Unicode text (SendMessage refuses other bytes); binary content travels in Binary attributes (case \"Binary attributes of every byte value\")",
		conformance.KindEmptyPayload:  "SendMessage refuses an empty body (MessageBody is at least 1 character)",
		conformance.KindEmpty:         "SendMessage refuses an empty attribute value (String, Number or Binary) and an empty body",
		conformance.KindDuplicated:    "message attributes are a map keyed by name: a producer cannot give a name twice",
	}
}

// DeadLetterContents peeks at the whole dead-letter queue: it receives (each message hidden for
// one second) until a receive returns nothing it has not seen, then makes every message it received visible again at once (ChangeMessageVisibility
// 0), so the next call sees the same queue. (A receive cannot ask for visibility 0 itself: the
// SDK leaves a zero VisibilityTimeout out of the request.) Messages are returned in
// SentTimestamp order, each decoded with the adapter's own attribute decoder (packed
// attributes unpacked), the record's own fields removed: millrace-dlq-* names that are not
// escaped originals, and the UUID attribute. fauxqs answers a short poll exactly; on real SQS
// an empty short poll may miss messages, and this would need a long poll.
func (harness) DeadLetterContents(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) (_ []conformance.Content, err error) {
	a := am.(*sqs.Adapter)
	url, err := a.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(a.QueueName(a.DeadLetterTopic(topic)))})
	if err != nil {
		return nil, err
	}
	var msgs []types.Message
	defer func() {
		for chunk := range slices.Chunk(msgs, 10) {
			in := &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: url.QueueUrl}
			for i, m := range chunk {
				in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
			}
			out, cerr := a.Client().ChangeMessageVisibilityBatch(context.WithoutCancel(ctx), in)
			if cerr == nil && len(out.Failed) > 0 {
				cerr = fmt.Errorf("%s: %s", aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
			}
			if cerr != nil && err == nil {
				err = fmt.Errorf("make the dead letters visible again: %w", cerr)
			}
		}
	}()
	for {
		out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			// One second, not the queue's 30 s: a receive whose response is lost under load
			// (the SDK retries it; fauxqs has already hidden what it took) hides the dead
			// letter for one second, not past the suite's wait.
			QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp},
		})
		if err != nil {
			return nil, err
		}
		fresh := false
		for _, m := range out.Messages {
			if !slices.ContainsFunc(msgs, func(x types.Message) bool { return aws.ToString(x.MessageId) == aws.ToString(m.MessageId) }) {
				fresh = true
			}
		}
		msgs = append(msgs, out.Messages...)
		if !fresh { // empty, or only messages this call has seen (their second has passed)
			break
		}
	}
	// A message another poll holds (its visibility not yet set back to 0, which lags under load)
	// is missed by this one: remember every dead letter seen, by message id, so a read never
	// reports fewer than were written. Distinct dead letters still count one each.
	seenMu.Lock()
	seen := seenDeadLetters[aws.ToString(url.QueueUrl)]
	if seen == nil {
		seen = map[string]types.Message{}
		seenDeadLetters[aws.ToString(url.QueueUrl)] = seen
	}
	for _, m := range msgs {
		seen[aws.ToString(m.MessageId)] = m
	}
	all := make([]types.Message, 0, len(seen))
	for _, m := range seen {
		all = append(all, m)
	}
	seenMu.Unlock()
	sorted := all
	slices.SortStableFunc(sorted, func(x, y types.Message) int {
		sx, _ := strconv.ParseInt(x.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		sy, _ := strconv.ParseInt(y.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		return cmp.Compare(sx, sy)
	})
	contents := make([]conformance.Content, 0, len(sorted))
	for _, m := range sorted {
		c, err := deadLetterContent(m)
		if err != nil {
			return nil, fmt.Errorf("dead letter %s: %w", aws.ToString(m.MessageId), err)
		}
		contents = append(contents, c)
	}
	return contents, nil
}

// seenDeadLetters remembers, per dead-letter queue URL, every dead letter DeadLetterContents
// has received, by message id.
var (
	seenMu          sync.Mutex
	seenDeadLetters = map[string]map[string]types.Message{}
)

// deadLetterContent decodes a dead letter's attributes as the adapter does and keeps the
// original ones, names unescaped, each with its data type.
func deadLetterContent(m types.Message) (conformance.Content, error) {
	md, typeOf, errs := sqs.DecodeAttributes(m.MessageAttributes)
	if len(errs) > 0 {
		return conformance.Content{}, fmt.Errorf("attributes do not decode: %v", errs)
	}
	c := conformance.Content{Body: []byte(aws.ToString(m.Body))}
	for name, v := range md {
		orig, ok := deadletter.OriginalKey(name)
		if !ok {
			continue // a record field
		}
		t := typeOf[name]
		if t == "" {
			t = "String"
		}
		c.Fields = append(c.Fields, deadletter.Field{Name: orig, Type: t, Value: []byte(v)})
	}
	slices.SortFunc(c.Fields, func(a, b deadletter.Field) int { return strings.Compare(a.Name, b.Name) })
	return c, nil
}

// Settled reports what the source queue still holds: visible, in flight or delayed.
func (harness) Settled(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) error {
	a := am.(*sqs.Adapter)
	url, err := a.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(a.QueueName(topic))})
	if err != nil {
		return err
	}
	names := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}
	out, err := a.Client().GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: names})
	if err != nil {
		return err
	}
	total, parts := 0, make([]string, 0, len(names))
	for _, n := range names {
		v, err := strconv.Atoi(out.Attributes[string(n)])
		if err != nil {
			return fmt.Errorf("%s = %q", n, out.Attributes[string(n)])
		}
		total += v
		parts = append(parts, fmt.Sprintf("%s %d", n, v))
	}
	if total != 0 {
		return fmt.Errorf("source queue holds messages: %s", strings.Join(parts, ", "))
	}
	return nil
}
