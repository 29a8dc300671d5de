package middleware

import (
	"runtime/debug"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Recover turns a panic in the handler into a Retry whose cause is a *millrace.PanicError with
// the panic value and stack.
func Recover() message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (out []*message.Message, err error) {
			defer func() {
				if r := recover(); r != nil {
					out, err = nil, millrace.Retry(&millrace.PanicError{Value: r, Stack: debug.Stack()})
				}
			}()
			return h(msg)
		}
	}
}
