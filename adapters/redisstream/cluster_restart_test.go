package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/redisslot"
	"github.com/millrace/millrace/internal/testenv"
)

// restartPortSets returns the port sets TestClusterNodeRestart may run its private cluster
// on, in the order to try them: MILLRACE_REDIS_RESTART_PORTS (three ports) alone when set, else
// each of 17101-17103, 17111-17113, ..., 17191-17193 whose ports and cluster bus ports (+10000)
// are all free on 127.0.0.1 right now, so that two runs at once (two checkouts, two go test) do
// not meet. A port found free can be taken before redis-server binds it: startRestartCluster
// then goes on to the next set. The shared test cluster of .ci/services/redis-cluster.sh
// (17001-17003) is never touched.
func restartPortSets(t *testing.T) [][]string {
	if v := os.Getenv("MILLRACE_REDIS_RESTART_PORTS"); v != "" {
		ports := strings.Fields(v)
		if len(ports) != 3 {
			t.Fatalf("MILLRACE_REDIS_RESTART_PORTS=%q: want three ports", v)
		}
		return [][]string{ports}
	}
	free := func(p int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	var sets [][]string
	for base := 17101; base <= 17191; base += 10 {
		ok := true
		for p := base; p < base+3 && ok; p++ {
			ok = free(p) && free(p+10000)
		}
		if ok {
			sets = append(sets, []string{strconv.Itoa(base), strconv.Itoa(base + 1), strconv.Itoa(base + 2)})
		}
	}
	if len(sets) == 0 {
		t.Fatal("no three free ports (and bus ports +10000) in 17101-17193 on 127.0.0.1; set MILLRACE_REDIS_RESTART_PORTS")
	}
	return sets
}

// errPortTaken: redis-server could not bind its port or bus port, or a Redis answers there.
var errPortTaken = errors.New("port taken")

// restartNode is one redis-server of the private cluster, run as a child process so that the
// test can SIGKILL it and start it again on the same port with the same node file and AOF.
type restartNode struct {
	port string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// restartCluster is a 3-master Redis Cluster (no replicas) on loopback, with
// cluster-node-timeout 2 s and an AOF fsynced on every write (appendfsync always), so that a
// master killed with SIGKILL and started again keeps every write it acknowledged: the
// deployment the package documentation's crash guarantees assume (AOF or a replica).
type restartCluster struct {
	t     *testing.T
	bin   string
	nodes []*restartNode
	slots [][2]int // per node
}

// startRestartCluster starts the private cluster, or fails in CI (skips elsewhere) when
// redis-server is missing. It tries the port sets of restartPortSets in turn until one binds.
func startRestartCluster(t *testing.T) *restartCluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("redis-server is not installed in CI (CI=true): %v", err)
		}
		t.Skipf("redis-server is not installed (%v); TestClusterNodeRestart starts its own cluster with it", err)
	}
	for _, ports := range restartPortSets(t) {
		c, err := tryRestartCluster(t, bin, ports)
		if err == nil {
			return c
		}
		if !errors.Is(err, errPortTaken) {
			t.Fatal(err)
		}
		t.Logf("ports %v: %v; trying the next set", ports, err)
	}
	t.Fatal("no port set of restartPortSets could be bound (MILLRACE_REDIS_RESTART_PORTS)")
	return nil
}

// tryRestartCluster starts the private cluster on ports; on an error its nodes are stopped.
func tryRestartCluster(t *testing.T, bin string, ports []string) (_ *restartCluster, err error) {
	t.Helper()
	c := &restartCluster{t: t, bin: bin, slots: [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}}
	defer func() {
		if err != nil {
			for _, n := range c.nodes {
				c.kill(n)
			}
		}
	}()
	base := t.TempDir()
	for _, p := range ports {
		if restartPing("127.0.0.1:"+p) == nil {
			return nil, fmt.Errorf("%w: 127.0.0.1:%s already has a Redis (stop it with: redis-cli -p %s shutdown nosave)", errPortTaken, p, p)
		}
		n := &restartNode{port: p, dir: filepath.Join(base, p)}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := c.start(n); err != nil {
			return nil, err
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.kill(n)
		}
	})
	ctx := context.Background()
	for i, n := range c.nodes {
		cl := c.nodeClient(n)
		if err := cl.ClusterAddSlotsRange(ctx, c.slots[i][0], c.slots[i][1]).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %v", n.port, err)
		}
		if i > 0 {
			if err := c.nodeClient(c.nodes[0]).ClusterMeet(ctx, "127.0.0.1", n.port).Err(); err != nil {
				return nil, fmt.Errorf("CLUSTER MEET %s: %v", n.port, err)
			}
		}
	}
	c.waitState("ok", nil, 30*time.Second)
	return c, nil
}

func restartPing(addr string) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cl.Ping(ctx).Err()
}

func (c *restartCluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, "127.0.0.1:"+n.port)
	}
	return out
}

// nodeClient is a plain client of one node, closed when the test ends.
func (c *restartCluster) nodeClient(n *restartNode) *redis.Client {
	cl := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + n.port, DialTimeout: 500 * time.Millisecond, MaxRetries: -1})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// start runs redis-server for n (again, after a kill: same port, node file and AOF) and waits
// until it answers PING. The child is in a process group of its own and gets SIGKILL when the
// test process dies (Pdeathsig), so that a test killed by -timeout, whose t.Cleanup never
// runs, leaves no redis-server behind. (Pdeathsig fires when the OS thread that started the
// child ends; the Go runtime keeps its threads, so in practice that is the process.) A server
// that exits because its port or bus port is taken returns errPortTaken.
func (c *restartCluster) start(n *restartNode) error {
	logPath := filepath.Join(n.dir, "redis.log")
	logf, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "--port", n.port, "--bind", "127.0.0.1", "--protected-mode", "yes",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--dir", n.dir, "--logfile", logPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start redis-server on %s: %v", n.port, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for restartPing("127.0.0.1:"+n.port) != nil {
		select {
		case <-done:
			out, _ := os.ReadFile(logPath)
			if strings.Contains(string(out), "Address already in use") {
				return fmt.Errorf("%w: redis-server on %s could not bind (log %s)", errPortTaken, n.port, logPath)
			}
			return fmt.Errorf("redis-server on %s exited at start: %v; log %s", n.port, cmd.ProcessState, logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s does not answer PING; log %s", n.port, logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The answer could come from another Redis that took the port after it was found free.
	if pid := restartPID("127.0.0.1:" + n.port); pid != cmd.Process.Pid {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
		return fmt.Errorf("%w: 127.0.0.1:%s answers from process %d, not from the redis-server started (%d)", errPortTaken, n.port, pid, cmd.Process.Pid)
	}
	return nil
}

// restartPID returns the process_id the Redis at addr reports (0 when it does not answer).
func restartPID(addr string) int {
	cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := cl.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

// restart starts n again after a kill, on its own port (its node file names it), trying again
// for up to 5 s while the port is taken.
func (c *restartCluster) restart(n *restartNode) {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.start(n)
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			c.t.Fatal(err)
		}
		c.t.Logf("restart: %v; trying again", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// kill SIGKILLs n's process (if running) and waits until it is gone.
func (c *restartCluster) kill(n *restartNode) {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

// state returns cluster_state as node n reports it ("" when n does not answer).
func (c *restartCluster) state(n *restartNode) string {
	cl := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + n.port, DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return v
		}
	}
	return ""
}

// waitState waits until every node but skip reports want and returns how long that took.
func (c *restartCluster) waitState(want string, skip *restartNode, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		ok := true
		for _, n := range c.nodes {
			if n != skip && c.state(n) != want {
				ok = false
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			c.t.Fatalf("the cluster did not report cluster_state:%s within %s", want, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// owner returns the node that serves slot, and one that does not.
func (c *restartCluster) owner(slot int) (own, other *restartNode) {
	for i, r := range c.slots {
		if slot >= r[0] && slot <= r[1] {
			return c.nodes[i], c.nodes[(i+1)%len(c.nodes)]
		}
	}
	panic("slot out of range")
}

// restartKind is what the handler does with a message, by its index modulo 10: "ok" succeeds
// at once; "once" fails its first attempt; "last" fails until its last allowed attempt and
// succeeds on it (the message whose lost ack used to be dead-lettered as exhausted); "dead"
// always fails and must be dead-lettered exactly once.
func restartKind(i int) string {
	switch i % 10 {
	case 4, 5:
		return "once"
	case 6, 7, 8:
		return "last"
	case 9:
		return "dead"
	default:
		return "ok"
	}
}

// restartKindOf is the kind of a message by its payload: "hold" (fails until its last
// attempt, which succeeds only once the cluster is down, so that its ack meets CLUSTERDOWN),
// else restartKind of the index the payload holds.
func restartKindOf(payload string) string {
	if payload == "hold" {
		return "hold"
	}
	i, _ := strconv.Atoi(payload)
	return restartKind(i)
}

// restartMsg is what the test saw of one entry.
type restartMsg struct {
	kind      string
	uuid      string
	calls     int
	successes int
}

// TestClusterNodeRestart runs a steady stream on a tagged stream ("{orders}.events") of a
// private 3-master Redis Cluster (restartCluster) while it SIGKILLs a master, waits until the
// cluster reports cluster_state:fail, and starts the master again on the same port (its node
// file kept, so it rejoins with its slots): first a master that does not own the stream's slot
// (every node answers CLUSTERDOWN until the cluster is whole again), then the master that owns
// it (connections refused, then CLUSTERDOWN; its AOF keeps the stream). One consumer, Window
// 16, MinIdle 8 s, MaxAttempts 3.
//
// It asserts: every Publish returns nil (a transient reply is tried again), nothing is lost
// (every "ok", "once" and "last" message succeeds, every "dead" one is dead-lettered once, and
// nothing stays pending or scheduled), no message that succeeded is ever dead-lettered, and no
// handler runs again after a success. Duplicates are 0 by the package documentation's bound: an
// ack that fails transiently is kept and sent again until Redis takes it, and the reclaimer
// does not hand out an entry whose ack this adapter still holds. The only other dead letters
// allowed are "attempts lost" ones (a reply lost with the owner's connection raises a delivery
// count without a delivery), at most Window per owner restart, and only for "last" messages.
func TestClusterNodeRestart(t *testing.T) {
	c := startRestartCluster(t)
	const stream = "{orders}.events"
	own, other := c.owner(int(redisslot.Of(stream)))
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs(), DialTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })

	const window = 16
	cfg := Config{
		Client: client, Group: "millrace-restart", Window: window,
		ProcessingBudget: 8 * time.Second, MinIdle: 8 * time.Second,
		ReclaimInterval: 50 * time.Millisecond, RecoverInterval: 200 * time.Millisecond, ReadBlock: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(200 * time.Millisecond)}
	if err := a.Provision(context.Background(), stream, policy); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	entries := map[string]*restartMsg{} // by stream entry ID
	const holds = 3
	failing := make(chan struct{}) // closed when the cluster reports fail after the first kill
	dups := 0
	var lastSuccess atomic.Int64 // unix nanos of the latest successful handler call
	runRouter(t, a, stream, policy, 6*time.Second, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		m := entries[at.NativeID]
		if m == nil {
			m = &restartMsg{kind: restartKindOf(string(msg.Payload)), uuid: msg.UUID}
			entries[at.NativeID] = m
		}
		m.calls++
		if m.successes > 0 {
			dups++
		}
		if m.kind == "hold" && at.Number == policy.MaxAttempts {
			mu.Unlock()
			<-failing // succeed once the cluster is down: the ack meets CLUSTERDOWN
			mu.Lock()
		}
		switch {
		case m.kind == "hold" && at.Number < policy.MaxAttempts:
			return fmt.Errorf("%s fails on attempt %d", m.kind, at.Number)
		case m.kind == "dead", m.kind == "once" && at.Number == 1, m.kind == "last" && at.Number < policy.MaxAttempts:
			return fmt.Errorf("%s fails on attempt %d", m.kind, at.Number)
		}
		m.successes++
		lastSuccess.Store(time.Now().UnixNano())
		return nil
	})

	// The publisher: one message per Publish call, about 200 a second, until stopped. A Publish
	// that fails is done again, as a producer would: after a lost connection (not a transient
	// reply, which Publish itself tries again) the first may have been appended, so one UUID
	// can have two entries; those are counted as the producer's duplicates, not the adapter's.
	var published, publishLost, publishTransient atomic.Int64
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		pub := a.Publisher()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			m := message.NewMessage(fmt.Sprintf("m%05d", i), []byte(strconv.Itoa(i)))
			for {
				err := pub.Publish(stream, m)
				if err == nil {
					break
				}
				if redisTransientReply(err) {
					if publishTransient.Add(1) <= 3 {
						t.Errorf("Publish of message %d failed with a transient reply: %v", i, err)
					}
				} else {
					publishLost.Add(1)
					t.Logf("Publish of message %d: %v (published again)", i, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			published.Add(1)
		}
	}()

	restart := func(n *restartNode, what string, hold bool) {
		time.Sleep(time.Second) // steady state
		if hold {
			for i := range holds {
				if err := a.Publisher().Publish(stream, message.NewMessage(fmt.Sprintf("hold%d", i), []byte("hold"))); err != nil {
					t.Fatal(err)
				}
				published.Add(1)
			}
		}
		time.Sleep(time.Second)
		before := published.Load()
		killedAt := time.Now()
		c.kill(n)
		toFail := c.waitState("fail", n, 30*time.Second)
		if hold {
			close(failing)
		}
		c.restart(n)
		toOK := c.waitState("ok", nil, 60*time.Second)
		okAt := time.Now()
		var resumed time.Duration = -1
		for deadline := okAt.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if l := time.Unix(0, lastSuccess.Load()); l.After(okAt) {
				resumed = l.Sub(okAt)
				break
			}
		}
		t.Logf("%s (%s): SIGKILLed; cluster_state:fail after %s; restarted; cluster_state:ok %s later; first handler success %s after that (%s after the kill); %d published meanwhile",
			what, n.port, toFail.Round(time.Millisecond), toOK.Round(time.Millisecond), resumed.Round(time.Millisecond),
			okAt.Add(resumed).Sub(killedAt).Round(time.Millisecond), published.Load()-before)
		if resumed < 0 {
			t.Errorf("no handler succeeded within 20 s after the cluster was ok again")
		}
	}
	restart(other, "master not owning the stream's slot", true)
	restart(own, "master owning the stream's slot", false)
	time.Sleep(2 * time.Second)
	close(stop)
	<-pubDone

	// Settle: every entry of the stream succeeded or was dead-lettered, and nothing is pending
	// or scheduled.
	ctx := context.Background()
	var all []redis.XMessage
	dead := map[string]int{} // dead letters by original entry ID
	settled := func() bool {
		var err error
		if all, err = client.XRange(ctx, stream, "-", "+").Result(); err != nil {
			return false
		}
		dl, err := client.XRange(ctx, a.DeadLetterTopic(stream), "-", "+").Result()
		if err != nil {
			return false
		}
		clear(dead)
		for _, e := range dl {
			if id, ok := e.Values[deadletter.KeyNativeID].(string); ok {
				dead[id]++
			}
		}
		pel, err := client.XPending(ctx, stream, cfg.Group).Result()
		if err != nil || pel.Count > 0 {
			return false
		}
		if n, err := client.ZCard(ctx, a.retryKey(stream)).Result(); err != nil || n > 0 {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range all {
			if m := entries[e.ID]; dead[e.ID] == 0 && (m == nil || m.successes == 0) {
				return false
			}
		}
		return true
	}
	ok := settled()
	for deadline := time.Now().Add(40 * time.Second); !ok && time.Now().Before(deadline); ok = settled() {
		time.Sleep(100 * time.Millisecond)
	}
	if !ok {
		pel, err := client.XPending(ctx, stream, cfg.Group).Result()
		t.Errorf("not settled 40 s after the last message: PEL %+v (%v)", pel, err)
	}

	mu.Lock()
	defer mu.Unlock()
	var lost, falseDead, lostAttempt, doubleDead []string
	perUUID := map[string]int{}
	for _, e := range all {
		uuid, _ := e.Values["_watermill_message_uuid"].(string)
		perUUID[uuid]++
		m := entries[e.ID]
		if m == nil {
			m = &restartMsg{kind: restartKindOf(fmt.Sprint(e.Values["payload"])), uuid: uuid}
		}
		desc := fmt.Sprintf("%s %s (%s, %d calls, %d successes, %d dead letters)", e.ID, uuid, m.kind, m.calls, m.successes, dead[e.ID])
		switch {
		case dead[e.ID] > 1:
			doubleDead = append(doubleDead, desc)
		case dead[e.ID] == 1 && m.successes > 0:
			falseDead = append(falseDead, desc)
		case dead[e.ID] == 1 && m.kind != "dead":
			lostAttempt = append(lostAttempt, desc)
		case dead[e.ID] == 0 && m.successes == 0:
			lost = append(lost, desc)
		}
	}
	producerDups := len(all) - len(perUUID)
	st := a.Stats()
	t.Logf("%d messages published in %d entries (%d Publish calls failed with a lost connection and were repeated, %d with a transient reply); %d dead letters; "+
		"duplicates (handler calls on an entry after its success) %d; XACK errors %d; entries recovered %d",
		published.Load(), len(all), publishLost.Load(), publishTransient.Load(), len(dead), dups, st.AckErrors, st.Recovered)
	if n := publishTransient.Load(); n > 0 {
		t.Errorf("%d Publish calls failed with a transient reply", n)
	}
	if int64(len(perUUID)) != published.Load() {
		t.Errorf("%d messages published, %d distinct UUIDs in the stream", published.Load(), len(perUUID))
	}
	if int64(producerDups) > publishLost.Load() {
		t.Errorf("%d UUIDs appended twice, more than the %d Publish calls that failed and were repeated", producerDups, publishLost.Load())
	}
	if len(lost) > 0 {
		t.Errorf("%d entries lost (neither succeeded nor dead-lettered): %v", len(lost), restartHead(lost))
	}
	if len(falseDead) > 0 {
		t.Errorf("%d entries dead-lettered although their handler had succeeded (false dead letters): %v", len(falseDead), restartHead(falseDead))
	}
	if len(doubleDead) > 0 {
		t.Errorf("%d entries dead-lettered more than once: %v", len(doubleDead), restartHead(doubleDead))
	}
	if len(lostAttempt) > window {
		t.Errorf("%d entries dead-lettered after an attempt lost with the owner's connection, above the bound of Window (%d) per owner restart: %v", len(lostAttempt), window, restartHead(lostAttempt))
	} else if len(lostAttempt) > 0 {
		t.Logf("%d entries dead-lettered after an attempt lost with the owner's connection (bound %d): %v", len(lostAttempt), window, lostAttempt)
	}
	if dups > 0 {
		t.Errorf("%d handler calls on entries that had succeeded: the bound for outages shorter than MinIdle, in one process, is 0", dups)
	}
}

// redisTransientReply is the test's own reading of a transient server reply (the adapter's
// transientReply did not exist before the fix, and this test must also run on the old code).
func redisTransientReply(err error) bool {
	return redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsLoadingError(err) || redis.IsMasterDownError(err)
}

// restartHead returns the first few items of s, for an error message.
func restartHead(s []string) []string {
	if len(s) > 10 {
		return append(s[:10:10], fmt.Sprintf("... %d more", len(s)-10))
	}
	return s
}
