package deadletter

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of the error-type and panic-stack fields of a record. They hold for the field's value
// as written (its JSON text), so that with the error text (millrace.MaxErrorText) and the other
// fields a record adds at most about 12 KiB to a message on every broker: SQS packs all record
// fields into one attribute (the 10-attribute limit is not touched) and, near the queue's size
// limit, leaves out the stack, then the types, before it cuts other fields; Kafka sizes its
// retry and dead-letter topics with these bounds included; RabbitMQ (one content header frame,
// 128 KiB by default) and NATS (max_payload, 1 MiB by default) leave them out, the stack first,
// of a dead letter that would not fit with them; Redis has no limit near them.
const (
	// MaxErrorTypes is the most types KeyErrorTypes lists.
	MaxErrorTypes = 16
	// MaxErrorTypeText bounds one type name; a longer one is cut and ends with "...".
	MaxErrorTypeText = 256
	// MaxErrorTypesBytes bounds KeyErrorTypes's value (the JSON array): the first types that
	// fit are kept.
	MaxErrorTypesBytes = 1024
	// MaxPanicStackBytes bounds KeyPanicStack's value (the JSON string): a longer stack is cut
	// at a line boundary and ends with a line saying how many bytes were left out.
	MaxPanicStackBytes = 8192
	// maxErrorWalk bounds the errors ErrorTypes visits: a chain may be long, a tree wide, and a
	// custom Unwrap may return its own receiver.
	maxErrorWalk = 64
)

// ErrorTypes returns the Go types (fmt %T) of err and of the errors in its cause chain, in the
// order errors.Is visits them (depth first; both Unwrap() error and Unwrap() []error are
// followed), each type once, within the bounds above: at most 64 errors are visited, so a
// chain that loops (an Unwrap returning its receiver) ends. A panic in an Unwrap method ends
// the walk with the types found so far. It returns nil for a nil err.
func ErrorTypes(err error) (types []string) {
	defer func() {
		if recover() != nil {
			types = BoundErrorTypes(types)
		}
	}()
	seen := map[string]bool{}
	todo := []error{err}
	for steps := 0; len(todo) > 0 && steps < maxErrorWalk && len(types) < MaxErrorTypes; {
		e := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if e == nil {
			continue
		}
		steps++
		if t := fmt.Sprintf("%T", e); !seen[t] {
			seen[t] = true
			types = append(types, t)
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			todo = append(todo, u.Unwrap())
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			for i := len(errs) - 1; i >= 0; i-- {
				todo = append(todo, errs[i])
			}
		}
		// Only the errors on top can still be visited: keep no more than the walk has left.
		if left := maxErrorWalk - steps; len(todo) > left {
			todo = todo[len(todo)-left:]
		}
	}
	return BoundErrorTypes(types)
}

// BoundErrorTypes returns types within the bounds of KeyErrorTypes: empty entries dropped, each
// made printable UTF-8 on one line (other characters become U+FFFD), cut to MaxErrorTypeText
// bytes, and only the first MaxErrorTypes whose JSON array fits MaxErrorTypesBytes. Applying it
// twice changes nothing.
func BoundErrorTypes(types []string) []string {
	var out []string
	n := len("[]")
	for _, t := range types {
		if len(out) == MaxErrorTypes {
			break
		}
		t = cutText(cleanText(t, false), MaxErrorTypeText)
		if t == "" {
			continue
		}
		sep := 0
		if len(out) > 0 {
			sep = 1
		}
		if n+sep+quotedLen(t) > MaxErrorTypesBytes {
			break
		}
		n += sep + quotedLen(t)
		out = append(out, t)
	}
	return out
}

// BoundPanicStack returns stack within the bound of KeyPanicStack: made valid UTF-8 without
// control characters other than newline and tab (others become U+FFFD), and, when its JSON
// string would exceed MaxPanicStackBytes, cut after the last whole line that leaves room for
// a final line "... N more bytes of stack left out". Applying it twice changes nothing.
func BoundPanicStack(stack string) string {
	stack = cleanText(stack, true)
	if quotedLen(stack) <= MaxPanicStackBytes {
		return stack
	}
	// The marker's number has at most as many digits as len(stack).
	room := MaxPanicStackBytes - quotedLen(stackMarker(len(stack)))
	n, kept := len(`""`), 0
	for kept < len(stack) {
		end := strings.IndexByte(stack[kept:], '\n')
		if end < 0 {
			end = len(stack)
		} else {
			end += kept + 1
		}
		line := quotedLen(stack[kept:end]) - len(`""`)
		if n+line > room {
			break
		}
		n += line
		kept = end
	}
	if kept == 0 { // a first line longer than the bound: cut inside it
		kept = len(cutText(stack, room/2-len(`""`)))
	}
	head := stack[:kept]
	if !strings.HasSuffix(head, "\n") && head != "" {
		head += "\n"
	}
	return head + stackMarker(len(stack)-kept)
}

func stackMarker(n int) string { return "... " + strconv.Itoa(n) + " more bytes of stack left out" }

// cleanText makes s valid UTF-8 whose characters are all printable, newline and tab too when
// lines is set; any other character (or invalid byte) becomes U+FFFD.
func cleanText(s string, lines bool) string {
	ok := func(r rune) bool {
		return r != utf8.RuneError && (strconv.IsPrint(r) || r == ' ' || (lines && (r == '\n' || r == '\t')))
	}
	clean := true
	for _, r := range s {
		if !ok(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !ok(r) {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}

// cutText cuts valid UTF-8 s to at most n bytes without splitting a character, ending it with
// "..." when it was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len("..."), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// quotedLen is the length of quote(s) for a cleaned s.
func quotedLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\\', '\n', '\t':
			n++
		}
	}
	return n
}

// quote writes cleaned text as a JSON string: only '"', '\\', newline and tab need escapes,
// so its length is quotedLen(s) and it holds no line break (NATS headers cannot carry one).
func quote(s string) string {
	var b strings.Builder
	b.Grow(quotedLen(s))
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// encodeErrorTypes is KeyErrorTypes's value for bounded types: a JSON array of strings, "" for
// none.
func encodeErrorTypes(types []string) string {
	if len(types) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, t := range types {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(quote(t))
	}
	b.WriteByte(']')
	return b.String()
}

// decodeErrorTypes reads KeyErrorTypes: a JSON array of strings, bounded again (the value is
// untrusted).
func decodeErrorTypes(v string) ([]string, error) {
	var types []string
	if err := json.Unmarshal([]byte(v), &types); err != nil {
		return nil, fmt.Errorf("%w: %s = %s: want a JSON array of strings", ErrInvalidRecord, KeyErrorTypes, shortValue(v))
	}
	return BoundErrorTypes(types), nil
}

// decodePanicStack reads KeyPanicStack: a JSON string, bounded again.
func decodePanicStack(v string) (string, error) {
	var stack string
	if err := json.Unmarshal([]byte(v), &stack); err != nil {
		return "", fmt.Errorf("%w: %s = %s: want a JSON string", ErrInvalidRecord, KeyPanicStack, shortValue(v))
	}
	return BoundPanicStack(stack), nil
}

// shortValue quotes at most the first 64 bytes of an untrusted value for an error message.
func shortValue(v string) string {
	if len(v) > 64 {
		return strconv.Quote(v[:64]) + "..."
	}
	return strconv.Quote(v)
}
