// Command kfakebroker runs an in-memory Kafka-protocol broker (github.com/twmb/franz-go/pkg/kfake)
// on loopback, for millrace's Kafka tests where no real Kafka can be installed.
//
// It lives in its own module so that franz-go never enters the library's go.mod; kfake at this
// pseudo-version compiles only with franz-go v1.22.3, pinned here.
//
// Topics are not auto-created (as on most production clusters): the millrace Kafka adapter must
// create its source, retry and dead-letter topics explicitly, and the tests prove it does.
//
//	go run . -port 19092                 # listen on 127.0.0.1:19092
//	go run . -port 0 -port-file /tmp/p   # pick a free port, write it to /tmp/p
//
// It prints "listening on 127.0.0.1:<port>" once it accepts connections and stops on SIGINT or
// SIGTERM.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 19092, "TCP port on 127.0.0.1; 0 picks a free one")
	portFile := flag.String("port-file", "", "write the chosen port to this file once listening")
	partitions := flag.Int("default-partitions", 1, "partitions of a topic created with -1 partitions")
	autoCreate := flag.Bool("auto-create-topics", false, "let metadata requests create missing topics")
	logLevel := flag.String("log-level", "none", "kfake log level: none, error, warn, info, debug")
	flag.Parse()

	if err := run(*port, *portFile, *partitions, *autoCreate, *logLevel); err != nil {
		log.Fatalf("kfakebroker: %v", err)
	}
}

func run(port int, portFile string, partitions int, autoCreate bool, logLevel string) error {
	levels := map[string]kfake.LogLevel{
		"none": kfake.LogLevelNone, "error": kfake.LogLevelError, "warn": kfake.LogLevelWarn,
		"info": kfake.LogLevelInfo, "debug": kfake.LogLevelDebug,
	}
	level, ok := levels[logLevel]
	if !ok {
		return fmt.Errorf("unknown -log-level %q", logLevel)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(partitions),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, level)),
		// kfake's default listener is 127.0.0.1 already; pinning it keeps the broker off
		// every other interface whatever kfake's default becomes.
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		}),
	}
	if autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	addr := c.ListenAddrs()[0]
	if portFile != "" {
		_, p, _ := net.SplitHostPort(addr)
		if err := os.WriteFile(portFile, []byte(p+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("listening on %s\n", addr)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	return nil
}
