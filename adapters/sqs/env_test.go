package sqs_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/internal/testenv"
)

// EnvEndpoint names the environment variable with the SQS endpoint the integration tests use,
// e.g. http://127.0.0.1:19324 as exported by .ci/services/sqs.sh (fauxqs), or a LocalStack,
// ElasticMQ or AWS endpoint. Unset or unreachable: the tests fail in CI and skip elsewhere.
// With AWS_ACCESS_KEY_ID set, the tests use the AWS_* credentials and AWS_REGION instead of
// the dummy credentials of a local endpoint.
const EnvEndpoint = "MILLRACE_SQS_ENDPOINT"

// endpoint returns the endpoint to test against, after checking that it answers.
func endpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv(EnvEndpoint)
	if ep == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", EnvEndpoint,
			errors.New(EnvEndpoint+" is not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	client := awssqs.NewFromConfig(awsConfig(), func(o *awssqs.Options) {
		o.BaseEndpoint = aws.String(ep)
		o.RetryMaxAttempts = 1
	})
	if _, err := client.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "SQS", ep, EnvEndpoint, err)
	}
	return ep
}

// awsConfig uses the AWS_* environment credentials when set, else dummy ones for a local endpoint.
func awsConfig() aws.Config {
	creds := aws.Credentials{AccessKeyID: "millrace", SecretAccessKey: "millrace"}
	if id := os.Getenv("AWS_ACCESS_KEY_ID"); id != "" {
		creds = aws.Credentials{AccessKeyID: id, SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}
	}
	return aws.Config{
		Region: testenv.Getenv("AWS_REGION", "us-east-1"),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return creds, nil
		}),
	}
}

// testConfig is the adapter configuration of the integration tests: short timeouts, so that a
// nacked message returns within seconds, a 1 s long poll, so that closing a subscriber (which
// waits for the poll in flight) takes at most a second, and queues created on demand (topics
// are unique).
func testConfig(t testing.TB) sqs.Config {
	cfg := awsConfig()
	return sqs.Config{
		Endpoint:          endpoint(t),
		AWSConfig:         &cfg,
		VisibilityTimeout: 3 * time.Second,
		ProcessingBudget:  2 * time.Second,
		WaitTime:          time.Second,
		CreateQueues:      true,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// newAdapter returns an adapter for cfg, closed when the test ends.
func newAdapter(t testing.TB, cfg sqs.Config) *sqs.Adapter {
	t.Helper()
	a, err := sqs.New(cfg)
	if err != nil {
		t.Fatalf("sqs.New: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}
