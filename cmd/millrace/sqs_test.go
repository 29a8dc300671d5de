package main

// envSQSEndpoint names the environment variable with the local SQS endpoint.
//
// The CLI's SQS end-to-end tests moved to adapters/sqs/cli_test.go (issue 14); this file stays
// only because plan_test.go's TestPlanCheckSQS uses the name. Once that test moves beside the
// SQS adapter (or defines the name itself), delete this file: cmd/millrace must have no
// broker-named file, and internal/layout says so.
const envSQSEndpoint = "MILLRACE_SQS_ENDPOINT"
