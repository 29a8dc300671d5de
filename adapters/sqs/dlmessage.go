package sqs

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/deadletter"
)

// KeyTrimmed is the record field (inside AttrDeadLetterRecord) that lists what the adapter
// dropped or cut so that a dead letter fits the dead-letter queue's MaximumMessageSize:
// "metadata: k1, k2; cut: millrace-dlq-last-error". It is absent when nothing was trimmed.
// deadletter.FromMessage ignores it; it stays in the received message's metadata.
const KeyTrimmed = deadletter.KeyPrefix + "sqs-trimmed"

// FallbackMaxMessageSize is the message size limit the adapter assumes for a dead-letter queue
// whose MaximumMessageSize attribute it cannot read: 256 KiB, the size every SQS queue accepted
// before the 1 MiB maximum of 2025.
const FallbackMaxMessageSize = 256 * 1024

// deadLetterMessage builds the SQS message of a dead letter, never failing on its metadata, so
// that a message that reached the adapter can always be dead-lettered:
//
//   - record fields are made valid UTF-8 (strings.ToValidUTF8, U+FFFD);
//   - each original metadata value keeps the data type its attribute had (types, by original
//     name; absent: String, or Binary for a value that is not valid UTF-8), so Number, Binary
//     and custom types ("String.json") read back as they arrived, byte for byte; an original
//     name escaped with deadletter.EscapeKey is an attribute of its own like any other;
//   - when the message exceeds limit bytes (SQS's size: body, attribute names, types and values),
//     the record gives way before the original content: the panic stack and then the error
//     types are left out (whole: they are JSON, which a cut would make unreadable); record
//     fields other than the reason and attempts are cut to 256 and then 32 bytes (the trace, a
//     55-byte traceparent, is left out whole instead); then only the reason and attempts stay;
//     then the record and UUID are left out, so the original body and attributes travel whole
//     (deadletter.FromMessage then cannot read a record, but nothing of the message is lost);
//     only then are original metadata entries dropped, largest first. KeyTrimmed says what was
//     trimmed while a record is left. The body is never altered.
//
// It fails only for a body SQS cannot carry (ErrPayloadNotText) or one that alone exceeds limit
// (ErrDeadLetterTooLarge); neither occurs for a body received from a queue with the same limit.
func deadLetterMessage(msg *message.Message, limit int, types map[string]string) (*awstypes.Message, error) {
	if err := checkText(msg.Payload); err != nil {
		return nil, fmt.Errorf("%w: message %s: %w", ErrPayloadNotText, msg.UUID, err)
	}
	uuid := toText(msg.UUID)
	record, plain, ptypes := map[string]string{}, map[string]string{}, map[string]string{}
	for k, v := range msg.Metadata {
		k = strings.ToValidUTF8(k, "\uFFFD")
		orig, isOrig := deadletter.OriginalKey(k)
		if !isOrig {
			record[k] = strings.ToValidUTF8(v, "\uFFFD")
			continue
		}
		plain[k] = v
		if t := types[orig]; t != "" {
			ptypes[k] = t
		}
	}
	fits := func() (*awstypes.Message, bool) {
		m := encode(uuid, msg.Payload, record, plain, ptypes)
		return m, messageSize(m) <= limit
	}
	if m, ok := fits(); ok {
		return m, nil
	}

	// 0. The panic stack, then the error types, left out whole (deadletter.FromMessage refuses a
	// part of their JSON).
	var cut []string
	for _, k := range []string{deadletter.KeyPanicStack, deadletter.KeyErrorTypes} {
		if _, ok := record[k]; !ok {
			continue
		}
		delete(record, k)
		cut = append(cut, k)
		record[KeyTrimmed] = trimNote(cut)
		if m, ok := fits(); ok {
			return m, nil
		}
	}
	// 1. Record fields cut short; the reason and attempt count stay whole.
	for _, n := range []int{256, 32} {
		for _, k := range slices.Sorted(maps.Keys(record)) {
			if k != deadletter.KeyReason && k != deadletter.KeyAttempts && k != KeyTrimmed && len(record[k]) > n {
				if k == deadletter.KeyTrace {
					delete(record, k) // left out whole: FromMessage refuses a part of a traceparent
				} else {
					record[k] = truncateUTF8(record[k], n)
				}
				if !slices.Contains(cut, k) {
					cut = append(cut, k)
				}
			}
		}
		record[KeyTrimmed] = trimNote(cut)
		if m, ok := fits(); ok {
			return m, nil
		}
	}
	// 2. Only what deadletter.FromMessage needs.
	record = map[string]string{
		deadletter.KeyReason:   record[deadletter.KeyReason],
		deadletter.KeyAttempts: record[deadletter.KeyAttempts],
		KeyTrimmed:             "record fields",
	}
	if m, ok := fits(); ok {
		return m, nil
	}
	// 3. The original message alone, whole: with its UUID, then without.
	record = nil
	if m, ok := fits(); ok {
		return m, nil
	}
	uuid = ""
	if m, ok := fits(); ok {
		return m, nil
	}
	// 4. The original metadata, largest entry first.
	keys := slices.SortedFunc(maps.Keys(plain), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b)+len(plain[b]), len(a)+len(plain[a])), cmp.Compare(a, b))
	})
	for _, k := range keys {
		delete(plain, k)
		if m, ok := fits(); ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%w: message %s: body of %d bytes, the dead-letter queue accepts %d",
		ErrDeadLetterTooLarge, msg.UUID, len(msg.Payload), limit)
}

// messageSize is the size SQS counts against MaximumMessageSize: the body, and each
// attribute's name, data type and value. Binary values count at their base64 length (what a
// JSON-protocol endpoint such as fauxqs counts; AWS counts the raw bytes, fewer).
func messageSize(m *awstypes.Message) int {
	n := len(aws.ToString(m.Body))
	for k, v := range m.MessageAttributes {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
		n += base64.StdEncoding.EncodedLen(len(v.BinaryValue))
	}
	return n
}

// trimNote is KeyTrimmed's value, at most 512 bytes.
func trimNote(cut []string) string {
	var note string
	if len(cut) > 0 {
		note = "cut: " + strings.Join(cut, ", ")
	}
	if len(note) > 512 {
		note = truncateUTF8(note, 512-len("...")) + "..."
	}
	return note
}

// truncateUTF8 cuts valid UTF-8 s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// toText returns s with every byte sequence or character SQS refuses in a String attribute
// replaced by U+FFFD.
func toText(s string) string {
	if isText(s) || s == "" {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if !sqsChar(r) {
			r = '\uFFFD'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// maxMessageSize parses a queue's MaximumMessageSize attribute.
func maxMessageSize(attr string) (int, bool) {
	n, err := strconv.Atoi(attr)
	return n, err == nil && n > 0
}

// packedField returns key from m's packed record attribute, "" if absent.
func packedField(m *awstypes.Message, key string) string {
	v, ok := m.MessageAttributes[AttrDeadLetterRecord]
	if !ok {
		return ""
	}
	var rec map[string]string
	if json.Unmarshal([]byte(aws.ToString(v.StringValue)), &rec) != nil {
		return ""
	}
	return rec[key]
}
