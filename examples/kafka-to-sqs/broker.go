package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"

	// The brokers this program runs on: each registers its URL schemes with brokerurl.
	_ "github.com/millrace/millrace/adapters/kafka"
	_ "github.com/millrace/millrace/adapters/nats"
	_ "github.com/millrace/millrace/adapters/sqs"
)

// NewAdapter opens the broker brokerURL names with brokerurl.OpenAdapter, the same URLs as the
// millrace CLI's: switching brokers is a change of NOTIFY_BROKER_URL, not of code.
//
//	kafka://host:port[,host:port...][?group=notification&partitions=3]
//	kafka://user:password@host:9093?sasl=scram-sha-512&tls=true[&tls_ca=/etc/kafka/ca.pem]
//	sqs+http://host:port[?region=us-east-1&create=true]     a local endpoint (fauxqs, LocalStack,
//	                                                       ElasticMQ), dummy credentials
//	sqs+https://sqs.<region>.amazonaws.com[?create=false]  AWS, with the SDK's default
//	                                                       credential chain (AWS_PROFILE, SSO,
//	                                                       IRSA, ECS and EC2 roles, AWS_*)
//	nats://host:port[?durable=notification&window=64]      NATS JetStream
//	nats://user:password@host:4222?durable=notification
//
// The parameters each driver takes are in the adapters' documentation (adapters/kafka,
// adapters/sqs and adapters/nats, urlDriver); a parameter a driver does not know is an error
// naming it.
//
// Timing is shared: the retry policy does not depend on the broker. What of it a broker needs
// at open is added to the URL as parameters when the URL does not set them (see withTiming):
// on SQS the visibility timeout (Timing.Visibility) and the processing budget (Timing.Budget,
// which the adapter checks against the visibility timeout); on NATS the ack wait
// (Timing.AckWait), the processing budget (Timing.Budget, which the adapter checks against
// half the ack wait) and the durable consumer "notification"; on Kafka the consumer group
// "notification" and 3 partitions for a topic Provision creates.
func NewAdapter(ctx context.Context, brokerURL string, t Timing) (millrace.Adapter, error) {
	withT, err := withTiming(brokerURL, t)
	if err != nil {
		return nil, err
	}
	return brokerurl.OpenAdapter(ctx, withT, brokerurl.Options{Logger: t.Logger})
}

// withTiming returns brokerURL with the parameters its broker takes from t (and the example's
// Kafka and NATS defaults) added where the URL does not set them. processing_budget is always
// t.Budget, the budget the router enforces: a URL that sets another one is refused, since the
// adapter would check a budget the handlers do not run under.
func withTiming(brokerURL string, t Timing) (string, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return "", fmt.Errorf("broker URL %q is not a URL", brokerurl.Redact(brokerURL))
	}
	q := u.Query()
	setDefault := func(name, value string) {
		if !q.Has(name) {
			q.Set(name, value)
		}
	}
	switch strings.ToLower(u.Scheme) {
	case "kafka":
		setDefault("group", "notification")
		setDefault("partitions", "3") // push.requested has 3 partitions
	case "sqs+http", "sqs+https":
		if err := setBudget(q, brokerURL, t); err != nil {
			return "", err
		}
		setDefault("visibility", t.Visibility.String())
	case "nats":
		if err := setBudget(q, brokerURL, t); err != nil {
			return "", err
		}
		setDefault("ack_wait", t.AckWait.String())
		setDefault("durable", "notification")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// setBudget sets q's processing_budget to t.Budget, the router's budget, which the adapter
// checks against its redelivery timeout (SQS visibility, NATS ack wait). A URL that already
// sets the same duration (in any spelling) is accepted; another one is refused, since the
// adapter would check a budget the handlers do not run under.
func setBudget(q url.Values, brokerURL string, t Timing) error {
	if v := q.Get("processing_budget"); v != "" {
		if d, err := time.ParseDuration(v); err != nil || d != t.Budget {
			return fmt.Errorf("broker URL %q: parameter processing_budget=%s differs from the consumer's budget %s (Timing.Budget, the router's): drop it from the URL",
				brokerurl.Redact(brokerURL), v, t.Budget)
		}
	}
	q.Set("processing_budget", t.Budget.String())
	return nil
}
