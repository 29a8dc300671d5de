package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/adapters/sqs"
)

// NewAdapter connects to the broker that brokerURL names. This is the only place where Kafka
// and SQS differ: switching is a change of NOTIFY_BROKER_URL, not of code.
//
//	kafka://host:port[,host:port...][?group=notification&partitions=3]
//	sqs+http://host:port[?region=us-east-1&create=true]     a local endpoint (fauxqs, LocalStack,
//	                                                       ElasticMQ), dummy credentials
//	sqs+https://sqs.<region>.amazonaws.com[?create=false]  AWS, credentials from AWS_ACCESS_KEY_ID,
//	                                                       AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//
// Timing is shared: the retry policy does not depend on the broker. On SQS the visibility
// timeout must exceed the processing budget (the adapter refuses otherwise).
func NewAdapter(brokerURL string, t Timing) (millrace.Adapter, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return nil, fmt.Errorf("broker URL %q: %w", brokerURL, err)
	}
	q := u.Query()
	switch u.Scheme {
	case "kafka":
		partitions, err := intParam(q, "partitions", 3) // push.requested has 3 partitions
		if err != nil {
			return nil, err
		}
		return kafka.New(kafka.Config{
			Brokers:       strings.Split(u.Host, ","),
			ConsumerGroup: stringParam(q, "group", "notification"),
			Partitions:    int32(partitions),
			Logger:        t.Logger,
		})
	case "sqs+http", "sqs+https":
		create, err := strconv.ParseBool(stringParam(q, "create", strconv.FormatBool(u.Scheme == "sqs+http")))
		if err != nil {
			return nil, fmt.Errorf("broker URL parameter create: %w", err)
		}
		cfg := sqs.Config{
			Endpoint:          strings.TrimPrefix(u.Scheme, "sqs+") + "://" + u.Host,
			Region:            stringParam(q, "region", "us-east-1"),
			VisibilityTimeout: t.Visibility,
			ProcessingBudget:  t.Budget,
			CreateQueues:      create,
			Logger:            t.Logger,
		}
		if id := os.Getenv("AWS_ACCESS_KEY_ID"); id != "" {
			creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}
			cfg.AWSConfig = &aws.Config{Region: cfg.Region, Credentials: aws.CredentialsProviderFunc(
				func(context.Context) (aws.Credentials, error) { return creds, nil })}
		}
		return sqs.New(cfg)
	}
	return nil, fmt.Errorf("broker URL %q: unknown scheme %q (want kafka, sqs+http or sqs+https)", brokerURL, u.Scheme)
}

func stringParam(q url.Values, name, def string) string {
	if v := q.Get(name); v != "" {
		return v
	}
	return def
}

func intParam(q url.Values, name string, def int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("broker URL parameter %s: %w", name, err)
	}
	return n, nil
}
