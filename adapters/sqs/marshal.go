package sqs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/deadletter"
)

// Message attributes the adapter writes besides plain metadata. SQS accepts at most 10
// attributes per message, so fields that would not fit travel packed as one JSON attribute.
const (
	// AttrUUID carries the Watermill message UUID (watermill-aws's name, for interoperability).
	AttrUUID = wmsqs.UUIDAttribute
	// AttrDeadLetterRecord carries every millrace-dlq-* field of a dead letter as one JSON object
	// of strings (11 fields would not fit in SQS's 10 attributes on their own).
	AttrDeadLetterRecord = "millrace-dlq-record"
	// AttrMetadata carries the whole metadata as one JSON object of strings when it cannot travel
	// as individual attributes: more entries than fit, a key that is not a valid attribute name,
	// or an empty value (SQS refuses empty attribute values).
	AttrMetadata = "millrace-metadata"
	// AttrMetadataBinary carries, next to AttrMetadata, the metadata values that are not valid
	// UTF-8 (a dead letter of a message received with Binary attributes) as one JSON object of
	// base64-encoded values. Unpacked, the values are the original bytes.
	AttrMetadataBinary = "millrace-metadata-binary"
)

// Keys the unmarshaler uses to hand native delivery state to the subscriber, which removes them
// before the handler sees the message. The NUL prefix cannot occur in an SQS attribute name, and
// these keys are written last, so message content cannot forge them.
const (
	internalPrefix       = "\x00millrace-sqs-"
	internalReceipt      = internalPrefix + "receipt"
	internalMessageID    = internalPrefix + "message-id"
	internalReceiveCount = internalPrefix + "receive-count"
	internalFirstReceive = internalPrefix + "first-receive"
	internalReceivedAt   = internalPrefix + "received-at"
	internalDecodeError  = internalPrefix + "decode-error"
)

// marshaler turns Watermill messages into SQS messages without altering the payload, and back.
// It implements watermill-aws's Marshaler and Unmarshaler.
type marshaler struct{}

var (
	_ wmsqs.Marshaler   = marshaler{}
	_ wmsqs.Unmarshaler = marshaler{}
)

// Marshal refuses (ErrPayloadNotText) a payload that SQS cannot carry byte for byte, and
// (ErrMetadataNotText) metadata values that are not valid UTF-8. Metadata travels as individual
// String attributes when it fits, otherwise packed into AttrMetadata; dead-letter fields travel
// packed into AttrDeadLetterRecord. Dead letters are built by deadLetterMessage instead, which
// never refuses metadata.
func (marshaler) Marshal(msg *message.Message) (*types.Message, error) {
	if err := checkText(msg.Payload); err != nil {
		return nil, fmt.Errorf("%w: message %s: %w", ErrPayloadNotText, msg.UUID, err)
	}
	if !isText(msg.UUID) {
		return nil, fmt.Errorf("%w: message UUID %q", ErrMetadataNotText, msg.UUID)
	}
	for k, v := range msg.Metadata {
		if !utf8.ValidString(v) || !utf8.ValidString(k) {
			return nil, fmt.Errorf("%w: message %s: metadata %q", ErrMetadataNotText, msg.UUID, k)
		}
	}
	record, plain := splitMetadata(msg.Metadata)
	return encode(msg.UUID, msg.Payload, record, plain), nil
}

// splitMetadata separates the dead-letter record fields from the plain metadata.
func splitMetadata(md message.Metadata) (record, plain map[string]string) {
	record, plain = map[string]string{}, map[string]string{}
	for k, v := range md {
		if strings.HasPrefix(k, deadletter.KeyPrefix) {
			record[k] = v
		} else {
			plain[k] = v
		}
	}
	return record, plain
}

// encode builds the SQS message. Record values and keys must be valid UTF-8 (JSON escapes
// the characters SQS refuses); a plain value that is not valid UTF-8 travels as a Binary
// attribute, or base64-encoded in AttrMetadataBinary when the metadata is packed. An empty uuid
// is left out (SQS refuses empty attribute values).
func encode(uuid string, body []byte, record, plain map[string]string) *types.Message {
	attrs := map[string]types.MessageAttributeValue{}
	if uuid != "" {
		attrs[AttrUUID] = stringAttr(uuid)
	}
	if len(record) > 0 {
		attrs[AttrDeadLetterRecord] = stringAttr(packJSON(record))
	}
	if individually(plain, MaxAttributes-len(attrs)) {
		for k, v := range plain {
			if utf8.ValidString(v) {
				attrs[k] = stringAttr(v)
			} else {
				attrs[k] = binaryAttr(v)
			}
		}
	} else {
		text, binary := map[string]string{}, map[string]string{}
		for k, v := range plain {
			if utf8.ValidString(v) {
				text[k] = v
			} else {
				binary[k] = base64.StdEncoding.EncodeToString([]byte(v))
			}
		}
		if len(text) > 0 {
			attrs[AttrMetadata] = stringAttr(packJSON(text))
		}
		if len(binary) > 0 {
			attrs[AttrMetadataBinary] = stringAttr(packJSON(binary))
		}
	}
	return &types.Message{Body: aws.String(string(body)), MessageAttributes: attrs}
}

// individually reports whether md can travel as at most room individual attributes: String
// attributes for SQS text, Binary ones for values that are not valid UTF-8.
func individually(md map[string]string, room int) bool {
	if len(md) > room {
		return false
	}
	for k, v := range md {
		if !validAttrName(k) || v == "" || (utf8.ValidString(v) && !isText(v)) {
			return false
		}
		if k == AttrUUID || k == AttrDeadLetterRecord || k == AttrMetadata || k == AttrMetadataBinary {
			return false
		}
	}
	return true
}

// validAttrName applies SQS's message attribute name rules: letters, digits, '-', '_', '.';
// at most 256 characters; no leading, trailing or double '.'; no "AWS." or "Amazon." prefix.
func validAttrName(k string) bool {
	if k == "" || len(k) > 256 || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	lower := strings.ToLower(k)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func stringAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(wmsqs.AWSStringDataType), StringValue: aws.String(v)}
}

func binaryAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(wmsqs.AWSBinaryDataType), BinaryValue: []byte(v)}
}

// packJSON encodes m (valid UTF-8 strings) as JSON text that SQS accepts.
func packJSON(m map[string]string) string {
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(sqsSafeJSON(b))
}

// Unmarshal never fails, so that no delivery is dropped or requeued forever: a packed attribute
// that does not decode is reported through internalDecodeError, and the subscriber marks the
// message with millrace.WithDecodeError (it is then dead-lettered as malformed, unchanged).
// The SQS delivery state (receipt handle, receive count, first receive time) goes into
// internal keys that the subscriber moves into the message context.
func (marshaler) Unmarshal(m *types.Message) (*message.Message, error) {
	receivedAt := time.Now()
	uuid := aws.ToString(m.MessageId)
	md := message.Metadata{}
	var decodeErrs []error
	for k, v := range m.MessageAttributes {
		switch k {
		case AttrUUID:
			if s := aws.ToString(v.StringValue); s != "" {
				uuid = s
			}
		case AttrMetadata, AttrDeadLetterRecord:
			var packed map[string]string
			if err := json.Unmarshal([]byte(aws.ToString(v.StringValue)), &packed); err != nil {
				decodeErrs = append(decodeErrs, fmt.Errorf("attribute %s: %w", k, err))
				md[k] = aws.ToString(v.StringValue)
				continue
			}
			maps.Copy(md, packed)
		case AttrMetadataBinary:
			var packed map[string]string
			if err := json.Unmarshal([]byte(aws.ToString(v.StringValue)), &packed); err != nil {
				decodeErrs = append(decodeErrs, fmt.Errorf("attribute %s: %w", k, err))
				md[k] = aws.ToString(v.StringValue)
				continue
			}
			for pk, pv := range packed {
				b, err := base64.StdEncoding.DecodeString(pv)
				if err != nil {
					decodeErrs = append(decodeErrs, fmt.Errorf("attribute %s, key %q: %w", k, pk, err))
					b = []byte(pv)
				}
				md[pk] = string(b)
			}
		default:
			if s, ok := attrValue(v); ok {
				md[k] = s
			}
		}
	}
	msg := message.NewMessage(uuid, []byte(aws.ToString(m.Body)))
	msg.Metadata = md
	md[internalReceipt] = aws.ToString(m.ReceiptHandle)
	md[internalMessageID] = aws.ToString(m.MessageId)
	md[internalReceiveCount] = m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]
	md[internalFirstReceive] = m.Attributes[string(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)]
	md[internalReceivedAt] = strconv.FormatInt(receivedAt.UnixNano(), 10)
	if len(decodeErrs) > 0 {
		md[internalDecodeError] = errors.Join(decodeErrs...).Error()
	}
	return msg, nil
}

// attrValue returns the text of a String, Number or Binary attribute (custom type suffixes such
// as "String.json" included).
func attrValue(v types.MessageAttributeValue) (string, bool) {
	t := aws.ToString(v.DataType)
	switch {
	case strings.HasPrefix(t, wmsqs.AWSStringDataType), strings.HasPrefix(t, wmsqs.AWSNumberDataType):
		return aws.ToString(v.StringValue), v.StringValue != nil
	case strings.HasPrefix(t, wmsqs.AWSBinaryDataType):
		return string(v.BinaryValue), true
	}
	return "", false
}
