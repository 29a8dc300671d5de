package redisretry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisguard"
)

// hiddenConn hides the TCP connection's SyscallConn, as a TLS connection does: go-redis's pool
// check then cannot see that the guard closed a condemned idle connection, and hands it out.
type hiddenConn struct{ net.Conn }

// TestOnceOnCondemnedConnIsResent is the second review's M1: a guarded connection condemned
// while idle refuses the write of a Once XADD. That error must satisfy NotRun (nothing was
// sent), so the caller's loop sends the XADD again, and it is appended exactly once. On the
// old code the refusal was a bare io.EOF: NotRun false, the XADD failed back to the caller.
func TestOnceOnCondemnedConnIsResent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := testClient(t)
	addr := direct.Options().Addr
	stream := fmt.Sprintf("millrace-redisretry.notsent.%d", time.Now().UnixNano())
	t.Cleanup(func() { direct.Del(ctx, stream) })

	c := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true, ReadTimeout: 100 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return hiddenConn{nc}, nil
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	redisguard.Install(c)

	// Two connections: held by cc, and idle in the pool.
	cc := c.Conn()
	t.Cleanup(func() { _ = cc.Close() })
	if err := cc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A reply that takes longer than ReadTimeout on cc's connection (WAIT blocks only this
	// client, for its timeout, when the replicas are not there): the guard marks the address
	// silent and condemns the idle connection, which was not heard from since.
	wait := redis.NewCmd(ctx, "wait", 100, 400)
	_ = cc.Process(ctx, Once(wait))
	var ne net.Error
	if err := wait.Err(); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("WAIT: %v; want a read timeout", err)
	}

	tries := 0
	var errs []error
	err := Loop{First: 10 * time.Millisecond, Max: 10 * time.Millisecond, Limit: 2 * time.Second}.Do(ctx,
		func(err error) bool { return NotRun(c, err) },
		func() error {
			tries++
			cmd := redis.NewStringCmd(ctx, "xadd", stream, "*", "k", "v")
			_ = c.Process(ctx, Once(cmd))
			errs = append(errs, cmd.Err())
			return cmd.Err()
		})
	t.Logf("tries %d, errors %v", tries, errs)
	if err != nil {
		t.Fatalf("Once XADD on a condemned connection: %v (NotRun %v); want it resent", err, NotRun(c, err))
	}
	if tries != 2 || !errors.Is(errs[0], redisguard.ErrNotSent) {
		t.Errorf("tries %d, first error %v: want 2 tries, the first refused with ErrNotSent", tries, errs[0])
	}
	if n, err := direct.XLen(ctx, stream).Result(); err != nil || n != 1 {
		t.Errorf("XLEN %d (%v): want 1", n, err)
	}
}
