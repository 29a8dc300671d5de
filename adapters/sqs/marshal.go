package sqs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

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

// AttrMetadataTypes carries, next to AttrMetadata, the SQS data type of every packed metadata
// value whose original attribute was not a plain String ("Number", "Binary", "String.json",
// ...), as one JSON object of strings, so a dead letter keeps each attribute's type.
const AttrMetadataTypes = "millrace-metadata-types"

// marshaler turns Watermill messages into SQS messages without altering the payload; it is
// watermill-aws's publisher Marshaler. The subscriber reads messages back with decodeMessage.
type marshaler struct {
	// group is Config.MessageGroup: nil reads metadata MetadataGroupID.
	group func(*message.Message) string
}

var _ wmsqs.Marshaler = marshaler{}

// Marshal refuses (ErrPayloadNotText) a payload that SQS cannot carry byte for byte, and
// (ErrMetadataNotText) metadata values that are not valid UTF-8. Metadata travels as individual
// String attributes when it fits, otherwise packed into AttrMetadata; dead-letter fields travel
// packed into AttrDeadLetterRecord. Dead letters are built by deadLetterMessage instead, which
// never refuses metadata.
func (m marshaler) Marshal(msg *message.Message) (*awstypes.Message, error) {
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
	out := encode(msg.UUID, msg.Payload, record, plain, nil)
	out.Attributes = fifoFields(msg, m.group) // read by sendInput on a FIFO queue
	return out, nil
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
// the characters SQS refuses); a plain value travels with its type from types (absent: String,
// or Binary for a value that is not valid UTF-8), as an individual attribute or, when the
// metadata is packed, in AttrMetadata (text types) or base64-encoded in AttrMetadataBinary
// (Binary types and values that are not UTF-8), with AttrMetadataTypes naming every type other
// than String. An empty uuid is left out (SQS refuses empty attribute values).
func encode(uuid string, body []byte, record, plain, types map[string]string) *awstypes.Message {
	attrs := map[string]awstypes.MessageAttributeValue{}
	if uuid != "" {
		attrs[AttrUUID] = stringAttr(uuid)
	}
	if len(record) > 0 {
		attrs[AttrDeadLetterRecord] = stringAttr(packJSON(record))
	}
	typeOf := func(k, v string) string {
		if t := types[k]; t != "" {
			return t
		}
		if utf8.ValidString(v) {
			return wmsqs.AWSStringDataType
		}
		return wmsqs.AWSBinaryDataType
	}
	if individually(plain, types, MaxAttributes-len(attrs)) {
		for k, v := range plain {
			if t := typeOf(k, v); isBinaryType(t) {
				attrs[k] = awstypes.MessageAttributeValue{DataType: aws.String(t), BinaryValue: []byte(v)}
			} else {
				attrs[k] = awstypes.MessageAttributeValue{DataType: aws.String(t), StringValue: aws.String(v)}
			}
		}
	} else {
		text, binary, typed := map[string]string{}, map[string]string{}, map[string]string{}
		for k, v := range plain {
			t := typeOf(k, v)
			if isBinaryType(t) || !utf8.ValidString(v) {
				binary[k] = base64.StdEncoding.EncodeToString([]byte(v))
			} else {
				text[k] = v
			}
			if t != wmsqs.AWSStringDataType && !(t == wmsqs.AWSBinaryDataType && !utf8.ValidString(v)) {
				typed[k] = t
			}
		}
		if len(text) > 0 {
			attrs[AttrMetadata] = stringAttr(packJSON(text))
		}
		if len(binary) > 0 {
			attrs[AttrMetadataBinary] = stringAttr(packJSON(binary))
		}
		if len(typed) > 0 {
			attrs[AttrMetadataTypes] = stringAttr(packJSON(typed))
		}
	}
	return &awstypes.Message{Body: aws.String(string(body)), MessageAttributes: attrs}
}

// isBinaryType reports whether an SQS data type holds a BinaryValue ("Binary", "Binary.x").
func isBinaryType(t string) bool {
	return t == wmsqs.AWSBinaryDataType || strings.HasPrefix(t, wmsqs.AWSBinaryDataType+".")
}

// validType reports whether t is an SQS data type: String, Number or Binary, optionally with a
// custom suffix (".x": letters, digits, '-', '_', '.'), at most 256 characters.
func validType(t string) bool {
	base, custom, hasCustom := strings.Cut(t, ".")
	if base != wmsqs.AWSStringDataType && base != wmsqs.AWSNumberDataType && base != wmsqs.AWSBinaryDataType {
		return false
	}
	if !hasCustom {
		return true
	}
	return len(t) <= 256 && custom != "" && validAttrName(custom+"x")
}

// individually reports whether md can travel as at most room individual attributes, each with
// its type (types, else String, or Binary for a value that is not valid UTF-8).
func individually(md, types map[string]string, room int) bool {
	if len(md) > room {
		return false
	}
	for k, v := range md {
		if !validAttrName(k) || v == "" {
			return false
		}
		if t := types[k]; t != "" {
			if !validType(t) || !isBinaryType(t) && !isText(v) {
				return false
			}
		} else if utf8.ValidString(v) && !isText(v) {
			return false
		}
		if k == AttrUUID || isPackingName(k) {
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

func stringAttr(v string) awstypes.MessageAttributeValue {
	return awstypes.MessageAttributeValue{DataType: aws.String(wmsqs.AWSStringDataType), StringValue: aws.String(v)}
}

// packJSON encodes m (valid UTF-8 strings) as JSON text that SQS accepts.
func packJSON(m map[string]string) string {
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(sqsSafeJSON(b))
}

// decodeMessage reads a received message: its body as payload; its attributes as metadata,
// byte for byte, packed ones (AttrMetadata, AttrMetadataBinary, AttrMetadataTypes,
// AttrDeadLetterRecord) unpacked; and the SQS delivery state (receipt handle, receive count,
// first receive time, each attribute's type). A packed attribute that does not decode, or a
// receive count that is missing or not a positive decimal, sets the delivery's decodeErr: the
// subscriber marks the message with millrace.WithDecodeError, and it is dead-lettered as
// malformed, unchanged. It never fails, so that no delivery is dropped or requeued forever.
// Allocation is proportional to the message's size.
func decodeMessage(m *awstypes.Message) (*message.Message, *delivery) {
	d := &delivery{receivedAt: time.Now(), receipt: aws.ToString(m.ReceiptHandle), messageID: aws.ToString(m.MessageId)}
	uuid := d.messageID
	md, types, errs := DecodeAttributes(m.MessageAttributes)
	if u, ok := m.MessageAttributes[AttrUUID]; ok {
		if s := aws.ToString(u.StringValue); s != "" {
			uuid = s
		}
	}
	d.types = types
	var err error
	if d.receiveCount, err = parseReceiveCount(m.Attributes[string(awstypes.MessageSystemAttributeNameApproximateReceiveCount)]); err != nil {
		errs = append(errs, err)
	}
	if ms, err := strconv.ParseInt(m.Attributes[string(awstypes.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], 10, 64); err == nil && ms > 0 {
		d.firstReceive = time.UnixMilli(ms)
	}
	d.groupID = m.Attributes[string(awstypes.MessageSystemAttributeNameMessageGroupId)]
	if len(errs) > 0 {
		d.decodeErr = errors.Join(errs...)
	}
	msg := message.NewMessage(uuid, []byte(aws.ToString(m.Body)))
	msg.Metadata = md
	return msg, d
}

// MaxReceiveCount caps the attempt number read from ApproximateReceiveCount: a larger value
// reads as MaxReceiveCount, past any policy's MaxAttempts, so the message is dead-lettered as
// exhausted.
const MaxReceiveCount = 1 << 20

// parseReceiveCount reads ApproximateReceiveCount: decimal digits only, at least 1, saturating
// at MaxReceiveCount. Missing, empty, zero, signed or non-numeric is an error: such a delivery
// cannot be counted, and counting it as a first attempt could retry it forever.
func parseReceiveCount(v string) (int, error) {
	if v == "" {
		return 0, errors.New("ApproximateReceiveCount is missing")
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("ApproximateReceiveCount %q is not a decimal count", clip(v))
		}
		n = min(n*10+int(c-'0'), MaxReceiveCount)
	}
	if n < 1 {
		return 0, fmt.Errorf("ApproximateReceiveCount %q is not at least 1", clip(v))
	}
	return n, nil
}

// clip shortens untrusted text quoted in errors.
func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "?") + "..."
	}
	return s
}

// DecodeAttributes reads SQS message attributes as the adapter's subscriber does: metadata byte
// for byte (a String AttrUUID left out: it is the UUID; one of another type is content), packed attributes unpacked; types holds the data type of
// every value whose attribute was not a plain String. DeadLetterStore reads dead letters
// with it. The result never depends on map iteration order.
//
// Only String attributes under the packing names (AttrMetadata, AttrMetadataBinary,
// AttrMetadataTypes, AttrDeadLetterRecord) are read as packing, and only all together: they are
// unpacked when every one of them applies exactly, and otherwise every one of them is kept as
// content under its own name, String, value unchanged, and errs says why. They apply exactly
// when each is a non-empty JSON object of strings with no key given twice (as millrace writes
// them); each AttrMetadataBinary value is base64 that reads back to the same text; every
// AttrMetadataTypes entry names a key packed in AttrMetadata or AttrMetadataBinary and a type
// SQS defines; every AttrDeadLetterRecord key is a record key (deadletter.KeyPrefix); and no
// packed key is also an attribute of its own or packed twice. An attribute of another type under
// a packing name is an attribute like any other.
func DecodeAttributes(attrs map[string]awstypes.MessageAttributeValue) (md message.Metadata, types map[string]string, errs []error) {
	md, types = message.Metadata{}, map[string]string{}
	packs := map[string]string{}
	for k, v := range attrs {
		isString := aws.ToString(v.DataType) == wmsqs.AWSStringDataType
		switch {
		case k == AttrUUID && isString:
		case isString && isPackingName(k):
			packs[k] = aws.ToString(v.StringValue)
		default:
			// millrace packs only into String attributes: one of another type under a packing
			// name is a foreign attribute like any other, kept with its type and bytes.
			s, t := attrValue(v)
			md[k] = s
			if t != wmsqs.AWSStringDataType {
				types[k] = t
			}
		}
	}
	if len(packs) == 0 {
		return md, types, nil
	}
	pmd, ptypes, err := unpack(packs, md)
	if err != nil {
		maps.Copy(md, packs) // every packing attribute, whole, as content (String)
		return md, types, []error{err}
	}
	maps.Copy(md, pmd)
	maps.Copy(types, ptypes)
	return md, types, nil
}

// packingNames are the attribute names millrace packs into, in the order unpack reads them.
var packingNames = []string{AttrDeadLetterRecord, AttrMetadata, AttrMetadataBinary, AttrMetadataTypes}

func isPackingName(k string) bool { return slices.Contains(packingNames, k) }

// unpack reads the packing attributes packs (name to JSON text) beside the attributes own holds
// already, and returns the metadata and types they carry, or an error naming the first packing
// attribute that does not apply exactly (see DecodeAttributes). It reads packs in a fixed order.
func unpack(packs map[string]string, own message.Metadata) (message.Metadata, map[string]string, error) {
	md, types := message.Metadata{}, map[string]string{}
	packed := map[string]map[string]string{}
	for _, name := range packingNames {
		text, ok := packs[name]
		if !ok {
			continue
		}
		m, err := strictStringObject(text)
		if err != nil {
			return nil, nil, fmt.Errorf("attribute %s: %w; the packing attributes are kept as they are", name, err)
		}
		packed[name] = m
	}
	put := func(name, k, v string) error {
		if _, ok := own[k]; ok {
			return fmt.Errorf("attribute %s: key %q is also an attribute of its own; the packing attributes are kept as they are", name, clip(k))
		}
		if _, ok := md[k]; ok {
			return fmt.Errorf("attribute %s: key %q is packed twice; the packing attributes are kept as they are", name, clip(k))
		}
		md[k] = v
		return nil
	}
	for _, name := range packingNames[:3] {
		for _, k := range slices.Sorted(maps.Keys(packed[name])) {
			v := packed[name][k]
			switch name {
			case AttrDeadLetterRecord:
				if !strings.HasPrefix(k, deadletter.KeyPrefix) {
					return nil, nil, fmt.Errorf("attribute %s: key %q is not a record key; the packing attributes are kept as they are", name, clip(k))
				}
			case AttrMetadataBinary:
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil || base64.StdEncoding.EncodeToString(b) != v {
					return nil, nil, fmt.Errorf("attribute %s: key %q is not base64 that reads back exactly; the packing attributes are kept as they are", name, clip(k))
				}
				v = string(b)
				if !utf8.Valid(b) {
					types[k] = wmsqs.AWSBinaryDataType
				}
			}
			if err := put(name, k, v); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(packed[AttrMetadataTypes])) {
		t := packed[AttrMetadataTypes][k]
		_, inText := packed[AttrMetadata][k]
		_, inBinary := packed[AttrMetadataBinary][k]
		if !inText && !inBinary {
			return nil, nil, fmt.Errorf("attribute %s: key %q is not packed metadata; the packing attributes are kept as they are", AttrMetadataTypes, clip(k))
		}
		if !validType(t) {
			return nil, nil, fmt.Errorf("attribute %s: key %q has type %q, which SQS does not define; the packing attributes are kept as they are", AttrMetadataTypes, clip(k), clip(t))
		}
		types[k] = t
	}
	return md, types, nil
}

// strictStringObject decodes text as a non-empty JSON object whose values are all strings and
// whose keys are all distinct (encoding/json would keep the last of a repeated key silently).
// Allocation is proportional to len(text).
func strictStringObject(text string) (map[string]string, error) {
	if !utf8.ValidString(text) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(strings.NewReader(text))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	m := map[string]string{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		k, _ := kt.(string) // an object key is always a string
		vt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		v, ok := vt.(string)
		if !ok {
			return nil, fmt.Errorf("key %q: value is not a JSON string", clip(k))
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("key %q given twice", clip(k))
		}
		m[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("text after the JSON object")
	}
	if len(m) == 0 {
		return nil, errors.New("an empty object (millrace writes no empty packing)")
	}
	return m, nil
}

// attrValue returns the value of an attribute (StringValue, or BinaryValue for a Binary type)
// and its data type. An attribute of a type SQS does not define keeps whichever value it has,
// typed Binary when that is its BinaryValue.
func attrValue(v awstypes.MessageAttributeValue) (string, string) {
	t := aws.ToString(v.DataType)
	switch {
	case validType(t) && isBinaryType(t):
		return string(v.BinaryValue), t
	case validType(t):
		return aws.ToString(v.StringValue), t
	case v.StringValue == nil && v.BinaryValue != nil:
		return string(v.BinaryValue), wmsqs.AWSBinaryDataType
	}
	return aws.ToString(v.StringValue), wmsqs.AWSStringDataType
}
