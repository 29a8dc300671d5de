package amqp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// headerText returns the stable text form of an AMQP header value, so that headers written by
// any producer (integers, tables, arrays, timestamps, bytes) fit Watermill's string metadata and
// never stop consumption. The form is deterministic: the same value always gives the same text.
//
//	string              as is
//	bool                true | false
//	integers            decimal
//	floats              shortest decimal (strconv 'g'); NaN, +Inf, -Inf as words
//	amqp091.Decimal     decimal with the scale applied, e.g. 123.45
//	time.Time           RFC 3339, UTC
//	[]byte              standard base64
//	nil (void)          empty string
//	table, array        JSON, keys sorted; nested values as above, numbers as JSON numbers
//	anything else       fmt %v
func headerText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case amqp091.Table, []any, []amqp091.Table:
		b, err := json.Marshal(jsonValue(x))
		if err != nil { // unreachable: jsonValue only yields JSON-safe values
			return fmt.Sprintf("%v", x)
		}
		return string(b)
	}
	return scalarText(v)
}

func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.FormatInt(int64(x), 10)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case amqp091.Decimal:
		return decimalText(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case nil:
		return ""
	}
	return fmt.Sprintf("%v", v)
}

// jsonValue converts a header value to a tree json.Marshal encodes without error.
func jsonValue(v any) any {
	switch x := v.(type) {
	case amqp091.Table:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = jsonValue(e)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case []amqp091.Table:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case nil, bool, string, int, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return x
	case float32:
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return scalarText(x)
		}
		return x
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return scalarText(x)
		}
		return x
	}
	return scalarText(v)
}

func decimalText(d amqp091.Decimal) string {
	s := strconv.FormatInt(int64(d.Value), 10)
	if d.Scale == 0 {
		return s
	}
	neg := d.Value < 0
	if neg {
		s = s[1:]
	}
	scale := int(d.Scale)
	for len(s) <= scale {
		s = "0" + s
	}
	s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	if neg {
		s = "-" + s
	}
	return s
}

// intValue reads an AMQP integer of any width, as RabbitMQ writes counts as long (int64) but
// other brokers or versions may not.
func intValue(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	}
	return 0, false
}
