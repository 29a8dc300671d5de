package middleware_test

import (
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/millrace/millrace/deadletter"
)

// The dead letter carries the traceparent of the span in the message context (the delivery's
// span, which telemetry's Outer starts outside Poison), and none without a span.
func TestDeadLetterRecordsTheAttemptsSpan(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	for _, tc := range []struct {
		name string
		sc   trace.SpanContext
		want string
	}{
		{"sampled", sc, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"not sampled", sc.WithTraceFlags(0), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{"no span", trace.SpanContext{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{number: 3}
			msg := msgWithCtx()
			msg.SetContext(trace.ContextWithSpanContext(msg.Context(), tc.sc))
			if _, err := chain(r, policy, failing())(msg); err != nil {
				t.Fatal(err)
			}
			if len(r.deadLetter) != 1 {
				t.Fatalf("dead letters %+v", r.deadLetter)
			}
			rec := r.deadLetter[0]
			if rec.Trace != tc.want {
				t.Fatalf("trace %q, want %q", rec.Trace, tc.want)
			}
			if got, ok := rec.Fields()[deadletter.KeyTrace]; ok != (tc.want != "") || got != tc.want {
				t.Fatalf("%s = %q (present %v), want %q", deadletter.KeyTrace, got, ok, tc.want)
			}
		})
	}
}
