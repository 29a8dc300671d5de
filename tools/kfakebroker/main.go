// Command kfakebroker runs an in-memory Kafka-protocol cluster (github.com/twmb/franz-go/pkg/kfake)
// on loopback, for millrace's Kafka tests where no real Kafka can be installed.
//
// It lives in its own module so that franz-go never enters the library's go.mod; kfake at this
// pseudo-version compiles only with franz-go v1.22.3, pinned here.
//
// Topics are not auto-created (as on most production clusters): the millrace Kafka adapter must
// create its source, retry and dead-letter topics explicitly, and the tests prove it does.
//
//	go run . -port 19092                            # one broker on 127.0.0.1:19092
//	go run . -port 19092 -brokers 3                 # brokers on 19092, 19093, 19094
//	go run . -port 0 -brokers 3 -port-file /tmp/p   # free ports, written to /tmp/p
//	go run . -port 19092 -brokers 3 -admin-port 19095
//
// Broker i (node id i) listens on -port + i; with -port 0 every broker gets a free port. It
// prints "listening on <addr>,<addr>,..." once every broker accepts connections and stops on
// SIGINT or SIGTERM.
//
// # Admin endpoint
//
// With -admin-port, an HTTP server on 127.0.0.1 lets a test play the cluster operator:
//
//	GET  /leader?topic=T&partition=P         the node id leading T/P (-1: no such partition)
//	POST /move?topic=T&partition=P&node=N    make node N the leader of T/P (epoch bumped)
//	GET  /brokers                            the brokers' addresses, comma-separated
//
// A move acts on one partition only, so a test moving the leaders of its own topics does not
// disturb other tests sharing the cluster. Clients learn of it as a real leader election: their
// next produce or fetch on the old leader fails with NOT_LEADER_OR_FOLLOWER and they refresh
// their metadata.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

type options struct {
	port       int
	brokers    int
	adminPort  int
	portFile   string
	partitions int
	autoCreate bool
	logLevel   string
}

func main() {
	var o options
	flag.IntVar(&o.port, "port", 19092, "TCP port of the first broker on 127.0.0.1 (broker i gets port+i); 0 picks free ones")
	flag.IntVar(&o.brokers, "brokers", 1, "number of brokers in the cluster (1 to 16)")
	flag.IntVar(&o.adminPort, "admin-port", -1, "TCP port of the admin HTTP endpoint on 127.0.0.1; -1 (default) serves none, 0 picks a free one")
	flag.StringVar(&o.portFile, "port-file", "", "write the brokers' ports, comma-separated, to this file once listening")
	flag.IntVar(&o.partitions, "default-partitions", 1, "partitions of a topic created with -1 partitions")
	flag.BoolVar(&o.autoCreate, "auto-create-topics", false, "let metadata requests create missing topics")
	flag.StringVar(&o.logLevel, "log-level", "none", "kfake log level: none, error, warn, info, debug")
	flag.Parse()

	if err := run(o); err != nil {
		log.Fatalf("kfakebroker: %v", err)
	}
}

func run(o options) error {
	levels := map[string]kfake.LogLevel{
		"none": kfake.LogLevelNone, "error": kfake.LogLevelError, "warn": kfake.LogLevelWarn,
		"info": kfake.LogLevelInfo, "debug": kfake.LogLevelDebug,
	}
	level, ok := levels[o.logLevel]
	if !ok {
		return fmt.Errorf("unknown -log-level %q", o.logLevel)
	}
	if o.brokers < 1 || o.brokers > 16 {
		return fmt.Errorf("-brokers %d: must be 1 to 16", o.brokers)
	}
	if o.port < 0 || o.port+o.brokers-1 > 65535 {
		return fmt.Errorf("-port %d with -brokers %d: ports must be 0 or within 1..65535", o.port, o.brokers)
	}
	ports := make([]int, o.brokers)
	if o.port != 0 {
		for i := range ports {
			ports[i] = o.port + i
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(o.brokers),
		kfake.Ports(ports...),
		kfake.DefaultNumPartitions(o.partitions),
		kfake.WithLogger(kfake.BasicLogger(os.Stderr, level)),
		// kfake asks for "127.0.0.1:<port>" already; pinning the host keeps every broker off
		// every other interface whatever kfake's default becomes.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort("127.0.0.1", p))
		}),
	}
	if o.autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	addrs := c.ListenAddrs()
	if o.adminPort >= 0 {
		srv, err := serveAdmin(c, o.adminPort)
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}()
	}
	if o.portFile != "" {
		var ps []string
		for _, a := range addrs {
			_, p, _ := net.SplitHostPort(a)
			ps = append(ps, p)
		}
		if err := os.WriteFile(o.portFile, []byte(strings.Join(ps, ",")+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("listening on %s\n", strings.Join(addrs, ","))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	return nil
}

// serveAdmin starts the admin HTTP endpoint on 127.0.0.1:port and prints its address.
func serveAdmin(c *kfake.Cluster, port int) (*http.Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("-admin-port: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, r *http.Request) {
		topic, partition, err := topicPartition(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d\n", c.LeaderFor(topic, partition))
	})
	mux.HandleFunc("POST /move", func(w http.ResponseWriter, r *http.Request) {
		topic, partition, err := topicPartition(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		node, err := strconv.ParseInt(r.URL.Query().Get("node"), 10, 32)
		if err != nil {
			http.Error(w, "node: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := c.MoveTopicPartition(topic, partition, int32(node)); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, "%d\n", c.LeaderFor(topic, partition))
	})
	mux.HandleFunc("GET /brokers", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, strings.Join(c.ListenAddrs(), ","))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("kfakebroker: admin endpoint: %v", err)
		}
	}()
	fmt.Printf("admin on %s\n", ln.Addr())
	return srv, nil
}

func topicPartition(r *http.Request) (string, int32, error) {
	q := r.URL.Query()
	topic := q.Get("topic")
	if topic == "" {
		return "", 0, errors.New("topic: missing")
	}
	p, err := strconv.ParseInt(q.Get("partition"), 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("partition: %w", err)
	}
	return topic, int32(p), nil
}
