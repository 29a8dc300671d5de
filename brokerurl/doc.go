// Package brokerurl opens millrace adapters and dead-letter stores from URLs, with one syntax
// for users' code, the examples and the millrace CLI:
//
//	redis://[user:password@]host:port/db?group=G        rediss:// for TLS
//	amqp://user:password@host:port/vhost                 amqps:// for TLS; ?management=URL
//	                                                     is the management API that lists DLQs
//	kafka://[user:password@]host:port[,host:port...]?group=G[&tls=true&sasl=scram-sha-512...]
//	sqs+https://sqs.<region>.amazonaws.com               sqs+http://host:port for a local endpoint
//	nats://host:4222?durable=D                           NATS JetStream
//	postgres://...                                       the table store (dead letters only)
//
// Each adapter package registers its schemes with the default Mux when it is imported, so a
// program names the brokers it supports with blank imports and nothing else:
//
//	import _ "github.com/millrace/millrace/adapters/kafka"
//
//	a, err := brokerurl.OpenAdapter(ctx, os.Getenv("BROKER_URL"), brokerurl.Options{})
//
// This follows gocloud.dev's URL openers: the default Mux is the one piece of package state, it
// is written only by the adapters' init functions, and a program that wants no global state
// builds its own Mux with NewMux and Register. A parameter a driver does not know is an error
// that names it (an *UnknownParameterError, with the parameters the scheme takes and a guess
// at the one meant), and a bad value is a *ParameterError naming the rule: a typo never silently
// falls back to a default. The broker client's own URL options (go-redis's dial_timeout,
// amqp091's heartbeat) are passed on to it by name.
package brokerurl
