package millrace_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

var errCause = errors.New("provider said 429")

func TestClassifyHelpers(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		outcome   millrace.Outcome
		malformed bool
		delay     time.Duration
	}{
		{"discard", millrace.Discard(errCause), millrace.OutcomeDiscard, false, 0},
		{"retry", millrace.Retry(errCause), millrace.OutcomeRetry, false, 0},
		{"retry after", millrace.RetryAfter(errCause, 7*time.Second), millrace.OutcomeRetry, false, 7 * time.Second},
		{"malformed", millrace.Malformed(errCause), millrace.OutcomeDiscard, true, 0},
		{"wrapped discard", fmt.Errorf("send: %w", millrace.Discard(errCause)), millrace.OutcomeDiscard, false, 0},
		{"plain error defaults to retry", errCause, millrace.OutcomeRetry, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			oe := millrace.Classify(c.err, nil)
			if oe.Outcome != c.outcome || oe.Malformed != c.malformed || oe.Delay != c.delay {
				t.Fatalf("got outcome %s malformed %v delay %s, want %s %v %s", oe.Outcome, oe.Malformed, oe.Delay, c.outcome, c.malformed, c.delay)
			}
			if !errors.Is(oe, errCause) {
				t.Fatalf("classified error %v lost its cause", oe)
			}
		})
	}
	if millrace.Classify(nil, nil) != nil {
		t.Fatal("Classify(nil) must be nil")
	}
}

func TestClassifierDecidesUnmarkedErrorsOnly(t *testing.T) {
	discardAll := func(error) millrace.Outcome { return millrace.OutcomeDiscard }
	if got := millrace.Classify(errCause, discardAll).Outcome; got != millrace.OutcomeDiscard {
		t.Fatalf("classifier ignored: %s", got)
	}
	if got := millrace.Classify(millrace.Retry(errCause), discardAll).Outcome; got != millrace.OutcomeRetry {
		t.Fatalf("classifier overrode an explicit Retry: %s", got)
	}
	successIsNotAnError := func(error) millrace.Outcome { return millrace.OutcomeSuccess }
	if got := millrace.Classify(errCause, successIsNotAnError).Outcome; got != millrace.OutcomeRetry {
		t.Fatalf("a classifier returning Success for an error must yield Retry, got %s", got)
	}
}

func TestNilCauseStillCarriesOutcome(t *testing.T) {
	err := millrace.Discard(nil)
	if err == nil || millrace.Classify(err, nil).Outcome != millrace.OutcomeDiscard {
		t.Fatalf("Discard(nil) = %v", err)
	}
}

func TestAttemptContextRoundTrip(t *testing.T) {
	if _, ok := millrace.AttemptFromContext(context.Background()); ok {
		t.Fatal("empty context reported an attempt")
	}
	a := &millrace.Attempt{Number: 3, MaxAttempts: 5, Broker: "memory"}
	got, ok := millrace.AttemptFromContext(millrace.WithAttempt(context.Background(), a))
	if !ok || got != *a {
		t.Fatalf("got %+v %v", got, ok)
	}
	if got, ok := millrace.AttemptFromContext(millrace.WithAttempt(millrace.WithAttempt(context.Background(), a), nil)); ok {
		t.Fatalf("a nil Attempt over another one: got %+v", got)
	}
	type other struct{}
	ctx := millrace.WithAttempt(context.WithValue(context.Background(), other{}, "kept"), a)
	if ctx.Value(other{}) != "kept" {
		t.Fatal("the parent's values are not reachable through the Attempt's context")
	}
	if got.IsLast() || !(millrace.Attempt{Number: 5, MaxAttempts: 5}).IsLast() {
		t.Fatal("IsLast wrong")
	}
}

// The Attempt's context names itself after its parent, as context.WithValue's does.
func TestAttemptContextString(t *testing.T) {
	ctx := millrace.WithAttempt(context.Background(), &millrace.Attempt{Number: 1})
	if s := fmt.Sprint(ctx); s != "context.Background.WithAttempt" {
		t.Fatalf("String %q", s)
	}
}
