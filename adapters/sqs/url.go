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

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
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
// &dlq_suffix=-dlq&wait_time=20s&window=32&pollers=2 setting the Config fields of the same meaning. create defaults
// to true on sqs+http and false on sqs+https. processing_budget is required unless the broker is
// opened with Options.NoConsume. The region signs the requests: the region parameter, else the
// one in an AWS host name, else (sqs+https to another host, such as a VPC endpoint) the default
// chain's (AWS_REGION, the profile's), else us-east-1. Credentials are never in the URL, as
// parameters or user info, and the URL has no path (it names the endpoint, not a queue) and no
// fragment: each is refused.
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
		Window:            p.Int("window", 0),
		Pollers:           p.Int("pollers", 0),
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
	if err := checkURLParts(u, scheme); err != nil {
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

// urlConfig is configFromURL for opening: a Config.Validate refusal of a field a URL parameter
// set is the parameter's error (parameterError).
func urlConfig(u *url.URL, opts brokerurl.Options) (Config, error) {
	cfg, err := configFromURL(u, opts)
	if err != nil {
		return Config{}, parameterError(strings.ToLower(u.Scheme), u.Query(), err)
	}
	return cfg, nil
}

// checkURLParts refuses the parts of u an SQS URL has no use for, which would otherwise be
// ignored: user info (credentials come from the SDK's chain), a path (a queue URL is not an
// endpoint) and a fragment. The messages never show the user info.
func checkURLParts(u *url.URL, scheme string) error {
	switch {
	case u.User != nil:
		return fmt.Errorf("%w: %s:// takes no user info (user:password@) in the URL: credentials come from the AWS SDK's default chain "+
			"(environment, shared config and credentials files, AWS_PROFILE, SSO, web identity, ECS and EC2 roles), and sqs+http:// uses dummy ones",
			brokerurl.ErrInvalidURL, scheme)
	case u.Path != "" && u.Path != "/":
		return fmt.Errorf("%w: %s:// takes no path (%q): the URL names the endpoint, and the adapter names each topic's queue (a queue URL is not a broker URL)",
			brokerurl.ErrInvalidURL, scheme, u.EscapedPath())
	case u.Fragment != "":
		return fmt.Errorf("%w: %s:// takes no fragment (%q)", brokerurl.ErrInvalidURL, scheme, "#"+u.EscapedFragment())
	}
	return nil
}

// configFieldParams maps the Config fields that URL parameters set to the parameters.
var configFieldParams = map[string]string{
	"sqs.Config.Region":            "region",
	"sqs.Config.VisibilityTimeout": "visibility",
	"sqs.Config.ProcessingBudget":  "processing_budget",
	"sqs.Config.CreateQueues":      "create",
	"sqs.Config.DeadLetterSuffix":  "dlq_suffix",
	"sqs.Config.WaitTime":          "wait_time",
	"sqs.Config.Window":            "window",
	"sqs.Config.Pollers":           "pollers",
	"sqs.Config.GiveUp":            "give_up",
}

// parameterError turns err, a Config.Validate refusal, into the refusal of the URL parameter
// that set the field (a *configParameterError): `sqs+http:// parameter visibility="61.5s"
// (sqs.Config.VisibilityTimeout) must be whole seconds ...`, the fields its rule names called by
// their parameters too. A field that no parameter in q set is left as Config.Validate named it.
func parameterError(scheme string, q url.Values, err error) error {
	var ce *millrace.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	name, ok := configFieldParams[ce.Field]
	if !ok || !q.Has(name) {
		return err
	}
	rule := ce.Rule
	for field, param := range configFieldParams {
		rule = strings.ReplaceAll(rule, field, param)
	}
	return &configParameterError{
		ParameterError: &brokerurl.ParameterError{Scheme: scheme, Name: name, Value: strings.Join(q[name], ","), Rule: "(" + ce.Field + ") " + rule},
		config:         ce,
	}
}

// configParameterError is a Config.Validate refusal of a field a URL parameter set. It reads as
// the parameter's *brokerurl.ParameterError (wrapping brokerurl.ErrInvalidURL) and wraps the
// *millrace.ConfigError (millrace.ErrInvalidConfig) too.
type configParameterError struct {
	*brokerurl.ParameterError
	config *millrace.ConfigError
}

// Unwrap returns the parameter's error and the configuration error.
func (e *configParameterError) Unwrap() []error { return []error{e.ParameterError, e.config} }

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
	cfg, err := urlConfig(u, opts)
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
	// New makes no call: check the endpoint answers, so an unreachable one fails here. A role
	// without sqs:ListQueues (a least-privilege consumer's) is refused it after AWS has
	// authenticated the request: the endpoint answered and the credentials are good.
	if _, err := a.Client().ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		if !accessDenied(err) {
			_ = a.Close()
			return nil, fmt.Errorf("connect to %s: %w", brokerurl.Redact(u.String()), err)
		}
		opts.LoggerOrDiscard().Debug("sqs: ListQueues denied at open; the endpoint answered and authenticated the request",
			"endpoint", cfg.Endpoint, "error", err)
	}
	return a, nil
}

// accessDeniedCodes are the error codes of an authenticated request that IAM refuses: SQS's
// own (the AWS query protocol's, sent in x-amzn-query-error) and the JSON protocol's. A bad
// key or signature (InvalidClientTokenId, SignatureDoesNotMatch, UnrecognizedClientException)
// has its own code, refused before any permission is looked at.
var accessDeniedCodes = []string{"AccessDenied", "AccessDeniedException"}

// accessDenied reports whether err is an API error whose code is one of accessDeniedCodes.
func accessDenied(err error) bool {
	var api interface{ ErrorCode() string } // smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	return slices.ContainsFunc(accessDeniedCodes, func(c string) bool { return strings.EqualFold(c, api.ErrorCode()) })
}

// OpenAdapter opens the adapter u names, after checking the endpoint answers (ListQueues; an
// AccessDenied answer, of a role without sqs:ListQueues, counts as an answer).
func (urlDriver) OpenAdapter(ctx context.Context, u *url.URL, opts brokerurl.Options) (millrace.Adapter, error) {
	return openURL(ctx, u, opts)
}

// Open opens the broker u names: the adapter, whose client the operations use. It checks the
// endpoint as OpenAdapter does; an operation the credentials may not call fails on its own call.
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
	_ brokerurl.ReplayChecker    = (*urlBroker)(nil)
)

// Adapter returns the adapter on this connection.
func (b *urlBroker) Adapter() millrace.Adapter { return b.a }

// PrepareReplay gives a replay a fresh deduplication ID (metadata MetadataDeduplicationID): on
// a FIFO queue SQS would otherwise drop a replay within 5 minutes of the original's send as a
// duplicate of it (same UUID), and the dead letter, replayed, would be deleted. A dead letter of
// a FIFO queue (its record's OriginalKey is its message group) gets its group back, unless its
// metadata names one.
func (b *urlBroker) PrepareReplay(rec deadletter.Record, msg *message.Message) {
	if rec.OriginalKey != "" && msg.Metadata.Get(MetadataGroupID) == "" {
		msg.Metadata.Set(MetadataGroupID, rec.OriginalKey)
	}
	msg.Metadata.Set(MetadataDeduplicationID, watermill.NewUUID())
}

// CheckReplay refuses, with deadletter.ErrNotReplayable, a replay to topic that the publisher
// or SQS would refuse however often it is tried (brokerurl.ReplayChecker): a payload or
// metadata that is not UTF-8 text (ErrPayloadNotText, ErrMetadataNotText); on a FIFO queue, no
// valid message group (ErrMessageGroup: neither the dead letter's OriginalKey, which
// PrepareReplay sets, nor its metadata MetadataGroupID names one SQS takes); or a message, as
// the publisher encodes it, larger than the queue's MaximumMessageSize (256 KiB assumed when
// the attribute cannot be read, as for dead letters). It runs the publisher's own checks; its
// only calls are GetQueueUrl and GetQueueAttributes, once per queue (the adapter caches both),
// whose failures it returns as they are.
func (b *urlBroker) CheckReplay(ctx context.Context, topic string, rec deadletter.Record, msg *message.Message) error {
	queue := b.a.QueueName(topic)
	m, err := (marshaler{group: b.a.cfg.MessageGroup}).Marshal(msg)
	if err == nil {
		// sendInput builds the SendMessage input from the queue URL, whose ".fifo" suffix is all
		// it reads of it: the queue's name has the same.
		_, err = sendInput(ctx, wmsqs.QueueURL(queue), m)
	}
	switch {
	case errors.Is(err, ErrMessageGroup):
		return fmt.Errorf("%w: %w; the dead letter's OriginalKey %q names no valid group (a dead letter of a standard queue has none)",
			deadletter.ErrNotReplayable, err, clip(rec.OriginalKey))
	case errors.Is(err, ErrPayloadNotText), errors.Is(err, ErrMetadataNotText):
		return fmt.Errorf("%w: %w", deadletter.ErrNotReplayable, err)
	case err != nil:
		return err
	}
	url, ok, err := b.a.urls.lookup(ctx, queue) // the publisher's cache: no GetQueueUrl per dead letter
	if err != nil || !ok {
		return err // a missing queue: the replay checked its targets, and the publish says so
	}
	if size, limit := messageSize(m), b.a.urls.maxSize(ctx, url); size > limit {
		return fmt.Errorf("%w: the message is %d bytes (body and attributes as the publisher encodes them), queue %s takes at most %d (MaximumMessageSize)",
			deadletter.ErrNotReplayable, size, queue, limit)
	}
	return nil
}

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
// attributes with their SQS data types, as DeadLetterStore gives them back): one
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
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(qurl), MessageBody: aws.String(string(rec.Payload)), MessageAttributes: attrs}
	if isFIFOQueue(qurl) { // send fields, not content: the original's group, a fresh deduplication ID
		group := rec.OriginalKey
		if group == "" {
			group = rec.Metadata[MetadataGroupID]
		}
		if !validFIFOID(group) {
			return fmt.Errorf("%w: %w: the dead letter records no valid message group (OriginalKey %q)", deadletter.ErrNotReplayable, ErrMessageGroup, clip(group))
		}
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(watermill.NewUUID())
	}
	_, err = b.a.Client().SendMessage(ctx, in)
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
