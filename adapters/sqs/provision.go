package sqs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/satmath"
)

const (
	attrVisibility = string(types.QueueAttributeNameVisibilityTimeout)
	attrRetention  = string(types.QueueAttributeNameMessageRetentionPeriod)
	attrRedrive    = string(types.QueueAttributeNameRedrivePolicy)
	attrArn        = string(types.QueueAttributeNameQueueArn)
)

// Provision makes sure topic's queue and its dead-letter queue exist with the attributes the
// configuration and policy need, or (CreateQueues off) that they already do:
//
//	dead-letter queue  MessageRetentionPeriod = DeadLetterRetention
//	queue              VisibilityTimeout = Config.VisibilityTimeout
//	                   MessageRetentionPeriod long enough for every attempt and delay
//	                   RedrivePolicy {deadLetterTargetArn: the dead-letter queue,
//	                   maxReceiveCount: MaxAttempts} under GiveUpRedrive; under GiveUpSend an
//	                   existing RedrivePolicy is kept only if its maxReceiveCount = MaxAttempts
//
// With CreateQueues on, missing queues are created and differing attributes set (logged as a
// warning); otherwise a *MismatchError lists every difference. A RedrivePolicy whose
// maxReceiveCount disagrees with policy.MaxAttempts is refused: a smaller count gives up before
// the policy's last attempt, a larger one leaves the queue's give-up unreachable.
func (a *Adapter) Provision(ctx context.Context, topic string, policy millrace.RetryPolicy) error {
	if err := policy.ValidateFor(a.Capabilities()); err != nil {
		return err
	}
	if err := checkRetention(policy, a.cfg.VisibilityTimeout); err != nil {
		return err
	}
	if err := a.checkGiveUp(topic); err != nil {
		return err
	}
	need := retentionNeeded(policy, a.cfg.VisibilityTimeout)

	dlqName := a.QueueName(a.DeadLetterTopic(topic))
	dlqURL, err := a.provisionQueue(ctx, dlqName, map[string]string{attrRetention: seconds(a.cfg.DeadLetterRetention)},
		func(got map[string]string) ([]Mismatch, error) {
			if got[attrRetention] != seconds(a.cfg.DeadLetterRetention) {
				return []Mismatch{{Attribute: attrRetention, Want: seconds(a.cfg.DeadLetterRetention), Got: got[attrRetention],
					Why: "Config.DeadLetterRetention"}}, nil
			}
			return nil, nil
		})
	if err != nil {
		return err
	}
	dlqArn, err := a.queueAttribute(ctx, dlqURL, attrArn)
	if err != nil {
		return err
	}

	name := a.QueueName(topic)
	want := map[string]string{attrVisibility: seconds(a.cfg.VisibilityTimeout)}
	wantRedrive := ""
	if a.cfg.GiveUp == GiveUpRedrive {
		wantRedrive = redrivePolicy(dlqArn, policy.MaxAttempts)
		want[attrRedrive] = wantRedrive
	}
	if need > 4*24*time.Hour { // beyond SQS's default retention
		want[attrRetention] = seconds(need.Round(time.Second) + time.Second)
	}
	hasRedrive := false // the existing queue's RedrivePolicy, kept under GiveUpSend
	_, err = a.provisionQueue(ctx, name, want, func(got map[string]string) ([]Mismatch, error) {
		var ms []Mismatch
		if got[attrVisibility] != want[attrVisibility] {
			ms = append(ms, Mismatch{Attribute: attrVisibility, Want: want[attrVisibility], Got: got[attrVisibility],
				Why: "Config.VisibilityTimeout, which must exceed Config.ProcessingBudget = " + a.cfg.ProcessingBudget.String()})
		}
		if r, err := strconv.ParseInt(got[attrRetention], 10, 64); err == nil && time.Duration(r)*time.Second < need {
			ms = append(ms, Mismatch{Attribute: attrRetention, Want: seconds(need.Round(time.Second) + time.Second), Got: got[attrRetention],
				Why: "messages would expire before their last attempt"})
		}
		gotTarget, gotMax, found := parseRedrive(got[attrRedrive])
		hasRedrive = found
		switch {
		case a.cfg.GiveUp == GiveUpRedrive && (!found || gotTarget != dlqArn || gotMax != policy.MaxAttempts):
			ms = append(ms, Mismatch{Attribute: attrRedrive, Want: wantRedrive, Got: got[attrRedrive],
				Why: "GiveUpRedrive needs SQS to move messages to " + dlqName + " after MaxAttempts receives"})
		case a.cfg.GiveUp == GiveUpSend && found && gotMax != policy.MaxAttempts:
			return nil, &millrace.ConfigError{Field: "queue " + name + " RedrivePolicy.maxReceiveCount", Value: strconv.Itoa(gotMax),
				Rule: fmt.Sprintf("must equal RetryPolicy.MaxAttempts = %d (a smaller count moves messages to the dead-letter queue before "+
					"their last attempt, a larger one is never reached); fix or remove the queue's RedrivePolicy", policy.MaxAttempts)}
		}
		return ms, nil
	})
	if err != nil {
		return err
	}

	// Record the RedrivePolicy that now applies (a kept one has maxReceiveCount = MaxAttempts),
	// for DeadLetter under GiveUpRedrive and for receivesCount.
	a.mu.Lock()
	if a.cfg.GiveUp == GiveUpRedrive || hasRedrive {
		a.redrive[topic] = policy.MaxAttempts
	} else {
		delete(a.redrive, topic)
	}
	a.mu.Unlock()
	return nil
}

// provisionQueue creates the queue called name with want when it is missing (CreateQueues on),
// or checks an existing one with check: differences are set (CreateQueues on) or returned as a
// *MismatchError; an error from check (a difference millrace does not own) is returned as is.
// It returns the queue URL.
func (a *Adapter) provisionQueue(ctx context.Context, name string, want map[string]string, check func(got map[string]string) ([]Mismatch, error)) (string, error) {
	url, created, err := a.ensureQueue(ctx, name, want)
	if err != nil || created {
		return url, err
	}
	out, err := a.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return "", fmt.Errorf("millrace sqs: get attributes of queue %s: %w", name, err)
	}
	ms, err := check(out.Attributes)
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return url, nil
	}
	if !a.cfg.CreateQueues {
		return "", &MismatchError{Queue: name, Mismatches: ms}
	}
	set := map[string]string{}
	for _, m := range ms {
		set[m.Attribute] = m.Want
	}
	if _, err := a.client.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: set}); err != nil {
		return "", fmt.Errorf("millrace sqs: set attributes of queue %s: %w", name, err)
	}
	a.cfg.Logger.WarnContext(ctx, "millrace sqs: queue attributes changed to match the configuration",
		"queue", name, "changes", (&MismatchError{Queue: name, Mismatches: ms}).Error())
	return url, nil
}

func (a *Adapter) queueAttribute(ctx context.Context, url, attr string) (string, error) {
	out, err := a.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeName(attr)},
	})
	if err != nil {
		return "", fmt.Errorf("millrace sqs: get %s of %s: %w", attr, url, err)
	}
	v := out.Attributes[attr]
	if v == "" {
		return "", fmt.Errorf("millrace sqs: queue %s has no %s", url, attr)
	}
	return v, nil
}

// retentionNeeded bounds the time from a message's first receive to its give-up: every retry
// delay at its longest, and every attempt holding the message for the visibility timeout. It
// saturates at the longest Duration instead of overflowing (many attempts of long delays).
func retentionNeeded(p millrace.RetryPolicy, visibility time.Duration) time.Duration {
	n := p.MaxAttempts
	return satmath.Add(satmath.Mul(n-1, p.MaxDelay()), satmath.Mul(n, visibility))
}

// checkRetention refuses a policy whose messages could outlive SQS's longest retention
// before their last attempt (see retentionNeeded).
func checkRetention(p millrace.RetryPolicy, visibility time.Duration) error {
	if need := retentionNeeded(p, visibility); need > MaxRetention {
		return &millrace.ConfigError{Field: "RetryPolicy", Value: need.String() + " from first receive to give-up", Limit: true,
			Rule: fmt.Sprintf("exceeds SQS's longest message retention %s: messages would expire before their last attempt", MaxRetention)}
	}
	return nil
}

// redrivePolicy is the RedrivePolicy attribute JSON (dead-letter settings go inside it, not in
// top-level attributes).
func redrivePolicy(targetArn string, maxReceiveCount int) string {
	b, _ := json.Marshal(struct {
		Target string `json:"deadLetterTargetArn"`
		Max    int    `json:"maxReceiveCount"`
	}{targetArn, maxReceiveCount})
	return string(b)
}

// parseRedrive reads a RedrivePolicy attribute; SQS writes maxReceiveCount as a number or a
// string depending on how it was set.
func parseRedrive(s string) (target string, maxReceive int, ok bool) {
	if s == "" {
		return "", 0, false
	}
	var p struct {
		Target string          `json:"deadLetterTargetArn"`
		Max    json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return "", 0, true // present but unreadable: differs from anything wanted
	}
	n, _ := strconv.Atoi(strings.Trim(string(p.Max), `"`))
	return p.Target, n, true
}

// checkGiveUp refuses GiveUpRedrive for a FIFO topic (Provision and Subscribe call it).
func (a *Adapter) checkGiveUp(topic string) error {
	if a.cfg.GiveUp == GiveUpRedrive && isFIFOQueue(a.QueueName(topic)) {
		return &millrace.ConfigError{Field: "sqs.Config.GiveUp", Value: "GiveUpRedrive (topic " + topic + ")",
			Rule: "a FIFO queue needs GiveUpSend: SQS's RedrivePolicy moves a FIFO queue's messages only to a FIFO dead-letter queue, " +
				"which hands out only the first dead letter of each message group, so the others could be neither listed nor replayed"}
	}
	return nil
}
