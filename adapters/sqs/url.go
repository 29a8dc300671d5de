package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
)

// Importing the package registers sqs+https:// and sqs+http:// with brokerurl's default Mux.
func init() { brokerurl.Register(urlDriver{}) }

// urlDriver opens SQS URLs:
//
//	sqs+https://sqs.<region>.amazonaws.com[?region=R]   AWS, with the SDK's default
//	                                                     configuration: credential chain
//	                                                     (environment, shared config and
//	                                                     credentials files and AWS_PROFILE, SSO,
//	                                                     web identity/IRSA, ECS and EC2 roles),
//	                                                     AWS_CA_BUNDLE, retries
//	sqs+http://host:port[?region=us-east-1]             a local endpoint, dummy credentials
//
// with &visibility=60s&processing_budget=50s&give_up=send|redrive&create=true|false
// &dlq_suffix=-dlq&wait_time=20s setting the Config fields of the same meaning. create defaults
// to true on sqs+http and false on sqs+https. processing_budget is required unless the broker is
// opened with Options.NoConsume. The region signs the requests: the region parameter, else the
// one in an AWS host name, else (sqs+https to another host, such as a VPC endpoint) the default
// chain's (AWS_REGION, the profile's), else us-east-1. Credentials are never URL parameters.
type urlDriver struct{}

var _ brokerurl.Driver = urlDriver{}

// Schemes returns "sqs+https" and "sqs+http".
func (urlDriver) Schemes() []string { return []string{"sqs+https", "sqs+http"} }

// configFromURL builds the adapter's Config from u without connecting or loading credentials.
func configFromURL(u *url.URL, opts brokerurl.Options) (Config, error) {
	scheme := strings.ToLower(u.Scheme)
	p := brokerurl.NewParams(u)
	cfg := Config{
		Region:            p.String("region", ""),
		VisibilityTimeout: p.Duration("visibility", 0),
		ProcessingBudget:  p.Duration("processing_budget", 0),
		CreateQueues:      p.Bool("create", scheme == "sqs+http"),
		DeadLetterSuffix:  p.String("dlq_suffix", ""),
		WaitTime:          p.Duration("wait_time", 0),
		Logger:            opts.LoggerOrDiscard(),
	}
	switch p.OneOf("give_up", "send", "send", "redrive") {
	case "redrive":
		cfg.GiveUp = GiveUpRedrive
	default:
		cfg.GiveUp = GiveUpSend
	}
	if err := p.Done(); err != nil {
		return Config{}, err
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("%w: %s:// needs the endpoint's host, e.g. sqs+https://sqs.eu-west-1.amazonaws.com or sqs+http://127.0.0.1:19324", brokerurl.ErrInvalidURL, scheme)
	}
	if cfg.Region == "" {
		cfg.Region = regionOf(u.Hostname())
	}
	cfg.Endpoint = strings.TrimPrefix(scheme, "sqs+") + "://" + u.Host
	if cfg.ProcessingBudget == 0 {
		if !opts.NoConsume {
			return Config{}, fmt.Errorf("%w: %s:// needs parameter processing_budget, the longest a handler may run (the router's Budget), below the visibility timeout", brokerurl.ErrInvalidURL, scheme)
		}
		// Never consumes: the adapter requires a budget below the visibility timeout.
		cfg.ProcessingBudget = time.Second
	}
	return cfg, cfg.Validate()
}

// regionOf reads the region of an AWS endpoint host (sqs.<region>.amazonaws.com), or returns
// "us-east-1" for any other host.
func regionOf(host string) string {
	if r, ok := awsRegion(host); ok {
		return r
	}
	return "us-east-1"
}

// awsRegion reads the region of an AWS endpoint host (sqs.<region>.amazonaws.com[.cn]); ok is
// false for any other host.
func awsRegion(host string) (string, bool) {
	parts := strings.Split(host, ".")
	if len(parts) >= 4 && parts[0] == "sqs" && parts[2] == "amazonaws" {
		return parts[1], true
	}
	return "", false
}

// openURL opens the adapter u names and checks the endpoint answers. sqs+https:// loads the SDK's
// default configuration (credential chain, shared config); sqs+http:// uses the adapter's local
// endpoint configuration.
func openURL(ctx context.Context, u *url.URL, opts brokerurl.Options) (*Adapter, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(u.Scheme, "sqs+https") {
		// The region signs the requests: the URL's (parameter or AWS host name), else the
		// default chain's (AWS_REGION, the profile's region), else us-east-1.
		var load []func(*awsconfig.LoadOptions) error
		if _, onAWS := awsRegion(u.Hostname()); onAWS || u.Query().Has("region") {
			load = append(load, awsconfig.WithRegion(cfg.Region))
		}
		ac, err := awsconfig.LoadDefaultConfig(ctx, load...)
		if err != nil {
			return nil, fmt.Errorf("load the AWS configuration: %w", err)
		}
		if ac.Region == "" {
			ac.Region = cfg.Region
		}
		cfg.AWSConfig = &ac
	}
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	// New makes no call: check the endpoint answers, so an unreachable one fails here.
	if _, err := a.Client().ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
	}
	return a, nil
}

// OpenAdapter opens the adapter u names, after checking the endpoint answers (ListQueues).
func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	return openURL(ctx, u, opts)
}

// Open opens the broker u names: the adapter, whose client the operations use.
func (urlDriver) Open(ctx context.Context, u *url.URL, opts brokerurl.Options) (brokerurl.Broker, error) {
	a, err := openURL(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return &urlBroker{a: a}, nil
}

// urlBroker is SQS opened by URL: replays are SendMessage calls in the adapter's format to the
// topic's queue, and dead letters are read from its dead-letter queues (DeadLetterStore).
type urlBroker struct{ a *Adapter }

var (
	_ brokerurl.Broker           = (*urlBroker)(nil)
	_ deadletter.NativePublisher = (*urlBroker)(nil)
)

// Adapter returns the adapter on this connection.
func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// PrepareReplay needs nothing on SQS.
func (b *urlBroker) PrepareReplay(deadletter.Record, *message.Message) {}

// DeadLetterDestinations lists the queues named like the adapter's dead-letter queues (ending
// with Config.DeadLetterSuffix, every page of ListQueues), sorted by name, each with SQS's
// approximate count of its messages: ApproximateNumberOfMessages plus
// ApproximateNumberOfMessagesNotVisible (those received and not yet deleted, e.g. held by a
// `millrace dlq` command). Topic is the work topic's queue name (the suffix cut off): SQS names
// do not keep a topic's dots.
func (b *urlBroker) DeadLetterDestinations(ctx context.Context) ([]brokerurl.Destination, error) {
	client := b.a.Client()
	var names []string
	for p := awssqs.NewListQueuesPaginator(client, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1000)}); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("sqs: list queues: %w", err)
		}
		for _, qurl := range page.QueueUrls {
			name := qurl[strings.LastIndexByte(qurl, '/')+1:]
			if len(name) > len(b.a.cfg.DeadLetterSuffix) && b.a.isDeadLetterQueue(name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]brokerurl.Destination, 0, len(names))
	for _, name := range names {
		qurl, ok, err := QueueURL(ctx, client, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // deleted since the listing
		}
		attrs, err := client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
			QueueUrl: aws.String(qurl),
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			},
		})
		var missing *types.QueueDoesNotExist
		if errors.As(err, &missing) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sqs: attributes of queue %s: %w", name, err)
		}
		var depth int64
		for _, k := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
			v := attrs.Attributes[string(k)]
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("sqs: queue %s attribute %s=%q is not a count", name, k, v)
			}
			depth += n
		}
		out = append(out, brokerurl.Destination{Name: name, Topic: strings.TrimSuffix(name, b.a.cfg.DeadLetterSuffix), Depth: depth, Approximate: true})
	}
	return out, nil
}

// PublishNative re-publishes a dead letter's Native content exactly (the original message's
// attributes with their SQS data types, as deadletter/sqsstore gives them back): one
// SendMessage to the topic's queue with rec.Payload as the body and exactly those attributes,
// a Binary type's value as the BinaryValue and any other as the StringValue. Nothing is added
// (no UUID attribute unless the original had one, no packing): the message is the original.
// Content SQS cannot carry as individual attributes is refused with
// deadletter.ErrNotReplayable and kept: a field that is not of an SQS data type (another
// broker's), more attributes than SQS allows, an empty value, a text value or body that is not
// valid UTF-8.
func (b *urlBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	if len(rec.Native) > MaxAttributes {
		return fmt.Errorf("%w: %d attributes, SQS takes at most %d on a message", deadletter.ErrNotReplayable, len(rec.Native), MaxAttributes)
	}
	if !utf8.Valid(rec.Payload) || len(rec.Payload) == 0 {
		return fmt.Errorf("%w: the body is empty or not UTF-8 text", deadletter.ErrNotReplayable)
	}
	attrs := make(map[string]types.MessageAttributeValue, len(rec.Native))
	for _, f := range rec.Native {
		base, _, _ := strings.Cut(f.Type, ".")
		if base != "String" && base != "Number" && base != "Binary" {
			return fmt.Errorf("%w: field %q is of type %q, not an SQS attribute", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		if _, dup := attrs[f.Name]; dup {
			return fmt.Errorf("%w: attribute %q given twice", deadletter.ErrNotReplayable, f.Name)
		}
		if len(f.Value) == 0 {
			return fmt.Errorf("%w: attribute %q is empty", deadletter.ErrNotReplayable, f.Name)
		}
		v := types.MessageAttributeValue{DataType: aws.String(f.Type)}
		if base == "Binary" {
			v.BinaryValue = f.Value
		} else if utf8.Valid(f.Value) {
			v.StringValue = aws.String(string(f.Value))
		} else {
			return fmt.Errorf("%w: attribute %q of type %s is not UTF-8 text", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		attrs[f.Name] = v
	}
	qurl, ok, err := QueueURL(ctx, b.a.Client(), b.a.QueueName(topic))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("queue %s does not exist", b.a.QueueName(topic))
	}
	_, err = b.a.Client().SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl: aws.String(qurl), MessageBody: aws.String(string(rec.Payload)), MessageAttributes: attrs,
	})
	return err
}

// TopicExists reports whether the topic's queue exists (GetQueueUrl).
func (b *urlBroker) TopicExists(ctx context.Context, topic string) (bool, error) {
	_, ok, err := QueueURL(ctx, b.a.Client(), b.a.QueueName(topic))
	return ok, err
}

// DeadLetters returns the dead-letter queue of dlq (a dead-letter topic or a queue name) as a
// store.
func (b *urlBroker) DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error) {
	return NewDeadLetterStore(ctx, b.a, dlq, StoreConfig{})
}

// Close closes the adapter.
func (b *urlBroker) Close() error { return b.a.Close() }
