package sqs

import (
	"context"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
)

// BrokerName is the adapter's name in Attempts and dead-letter records.
const BrokerName = "sqs"

// Adapter implements millrace.Adapter on Amazon SQS (standard queues): the attempt number is
// SQS's ApproximateReceiveCount, a retry is a visibility-timeout change, and give-up is a send
// to the dead-letter queue (or SQS's RedrivePolicy, see GiveUp).
type Adapter struct {
	cfg      Config
	client   *awssqs.Client
	awsCfg   aws.Config
	optFns   []func(*awssqs.Options)
	urls     *resolver
	pub      *wmsqs.Publisher
	wmLogger watermill.LoggerAdapter

	mu          sync.Mutex
	closed      bool
	subscribers map[*subscriber]struct{}
	// redrive maps a topic to the maxReceiveCount of its queue's RedrivePolicy, from Provision:
	// the one it sets under GiveUpRedrive, or the one it kept under GiveUpSend.
	redrive map[string]int

	givenBack givenBack // receives given back unhandled, not counted as attempts
}

var _ millrace.Adapter = (*Adapter)(nil)

// New validates cfg and returns an adapter. It makes no network call: Provision (called by
// router.Run) checks the queues.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	a := &Adapter{
		cfg:         cfg,
		awsCfg:      awsConfig(cfg),
		subscribers: map[*subscriber]struct{}{},
		redrive:     map[string]int{},
		wmLogger:    watermill.NewSlogLogger(cfg.Logger),
	}
	if cfg.Endpoint != "" {
		endpoint := cfg.Endpoint
		a.optFns = append(a.optFns, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	}
	a.optFns = append(a.optFns, guardHTTP(cfg.CallTimeout))
	a.client = awssqs.NewFromConfig(a.awsCfg, a.optFns...)
	a.urls = &resolver{a: a, cache: map[string]string{}}
	pub, err := wmsqs.NewPublisher(wmsqs.PublisherConfig{
		AWSConfig:                   a.awsCfg,
		OptFns:                      a.optFns,
		DoNotCreateQueueIfNotExists: !cfg.CreateQueues,
		QueueUrlResolver:            a.urls,
		GenerateCreateQueueInput:    a.createQueueInput,
		Marshaler:                   marshaler{group: cfg.MessageGroup},
		GenerateSendMessageInput:    sendInput,
	}, a.wmLogger)
	if err != nil {
		return nil, err
	}
	a.pub = pub
	return a, nil
}

// awsConfig returns cfg.AWSConfig, or a configuration for a local endpoint: static dummy
// credentials (local endpoints accept any) and cfg.Region.
func awsConfig(cfg Config) aws.Config {
	if cfg.AWSConfig != nil {
		return cfg.AWSConfig.Copy()
	}
	return aws.Config{
		Region: cfg.Region,
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "millrace", SecretAccessKey: "millrace", Source: "millrace-local-endpoint"}, nil
		})),
	}
}

// Capabilities declares SQS's native receive count, per-message delays in whole seconds, the
// longest delay ChangeMessageVisibility can still honour (12 h from the receive, minus the
// visibility timeout the handler may already have used), and the first attempt's time
// (ApproximateFirstReceiveTimestamp).
func (a *Adapter) Capabilities() millrace.Capabilities {
	return millrace.Capabilities{
		Broker:             BrokerName,
		NativeAttemptCount: true,
		PerMessageDelay:    true,
		MaxDelay:           a.cfg.maxDelay(),
		DelayGranularity:   1e9, // 1 s: visibility timeouts are whole seconds
		KnowsFirstAttempt:  true,
	}
}

// Publisher returns a watermill-aws publisher whose marshaler refuses payloads SQS cannot carry
// unchanged (ErrPayloadNotText) instead of altering them. With CreateQueues off, publishing to a
// queue that does not exist fails.
func (a *Adapter) Publisher() message.Publisher { return publisher{a: a, pub: a.pub} }

// DeadLetterTopic returns topic + Config.DeadLetterSuffix; Subscriber reads it. Its queue is
// a standard queue, a FIFO topic's too ("orders.fifo" -> "orders-fifo-dlq"): a FIFO queue
// hands out only the first waiting message of each group, so the dead letters behind it could
// be neither listed nor replayed one by one (see "FIFO queues" in the package documentation).
func (a *Adapter) DeadLetterTopic(topic string) string { return topic + a.cfg.DeadLetterSuffix }

// QueueName returns the SQS queue name of topic. A dead-letter topic keeps its suffix even when
// the name must be shortened to SQS's 80 characters.
func (a *Adapter) QueueName(topic string) string {
	if base, ok := strings.CutSuffix(topic, a.cfg.DeadLetterSuffix); ok {
		return queueName(base, maxQueueName-len(a.cfg.DeadLetterSuffix)) + a.cfg.DeadLetterSuffix
	}
	return QueueName(topic)
}

// receivesCount reports whether every receive of topic's messages counts as an attempt: under
// GiveUpRedrive, or when Provision found a RedrivePolicy on the queue (SQS moves a message
// after maxReceiveCount receives, give-backs included).
func (a *Adapter) receivesCount(topic string) bool {
	if a.cfg.GiveUp == GiveUpRedrive {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.redrive[topic]
	return ok
}

// isDeadLetterQueue reports whether a queue name is a dead-letter queue's.
func (a *Adapter) isDeadLetterQueue(name string) bool {
	return strings.HasSuffix(name, a.cfg.DeadLetterSuffix)
}

// Client returns the SQS client the adapter uses, for inspection and tooling.
func (a *Adapter) Client() *awssqs.Client { return a.client }

// Close ends every subscription made through the adapter's subscribers, all at once, as their
// Close does: it waits for the receives in flight (at most Config.WaitTime + CallTimeout), hands what they got to the consumers (given back if not taken
// within HandOffWait), and waits for the verdicts of the messages handed out, each at most
// until its visibility timeout ends. ScheduleRetry and DeadLetter refuse to work from the
// moment Close is called (millrace.ErrClosed), so close the router first.
func (a *Adapter) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*subscriber, 0, len(a.subscribers))
	for s := range a.subscribers {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { _ = s.Close() })
	}
	wg.Wait()
	return a.pub.Close()
}

// isClosed reports whether Close was called: ScheduleRetry and DeadLetter then return
// millrace.ErrClosed, like the publisher.
func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}
