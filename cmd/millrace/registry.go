package main

import (
	"errors"

	// Each blank import registers its broker's URL schemes with brokerurl's default Mux: the
	// CLI names no broker, and a new adapter is one more line here.
	_ "github.com/millrace/millrace/adapters/amqp"
	_ "github.com/millrace/millrace/adapters/kafka"
	_ "github.com/millrace/millrace/adapters/nats"
	_ "github.com/millrace/millrace/adapters/redisstream"
	_ "github.com/millrace/millrace/adapters/sqs"
	_ "github.com/millrace/millrace/deadletter/pgstore"
)

// errUsage marks bad command-line input: the exit status is 2 instead of 1.
var errUsage = errors.New("usage")
