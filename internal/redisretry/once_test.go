package redisretry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisretry/faultproxy"
)

// cutThenRefuse is a fault proxy in front of the test Redis that forwards the first XADD,
// drops the connection before its reply (Redis appended the entry) and then refuses every
// dial: the shape of a master killed right after it ran a command.
func cutThenRefuse(t *testing.T) *faultproxy.Proxy {
	var cut atomic.Bool
	return faultproxy.Start(t, testClient(t).Options().Addr, func(args []string) faultproxy.Action {
		if len(args) > 0 && (args[0] == "xadd" || args[0] == "XADD") && cut.CompareAndSwap(false, true) {
			return faultproxy.Action{Cut: true, Refuse: true}
		}
		return faultproxy.Action{}
	})
}

// TestLastTryHidesAWrittenOne is the reviewer's finding: go-redis retries an XADD whose reply
// was lost and returns only its last try's error, a refused dial, although Redis appended the
// entry. NotRun says that last try did not run, which is why only a command sent through Once
// is resent on NotRun. A Once XADD is not retried by go-redis: its error is
// the lost connection, which NotRun does not accept either.
func TestLastTryHidesAWrittenOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := testClient(t)
	for _, once := range []bool{false, true} {
		t.Run(fmt.Sprintf("once=%v", once), func(t *testing.T) {
			stream := fmt.Sprintf("millrace-redisretry.once.%v.%d", once, time.Now().UnixNano())
			t.Cleanup(func() { direct.Del(ctx, stream) })
			p := cutThenRefuse(t)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: 2, DialTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { _ = c.Close() })
			var err error
			if once {
				cmd := redis.NewStringCmd(ctx, "xadd", stream, "*", "k", "v")
				_ = c.Process(ctx, Once(cmd))
				err = cmd.Err()
			} else {
				err = c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"k", "v"}}).Err()
			}
			n, lenErr := direct.XLen(ctx, stream).Result()
			if lenErr != nil || n != 1 {
				t.Fatalf("XLEN %d (%v): want the entry appended once", n, lenErr)
			}
			if err == nil {
				t.Fatal("XADD through the cut succeeded")
			}
			var op *net.OpError
			dial := errors.As(err, &op) && op.Op == "dial"
			t.Logf("err %v (dial error %v)", err, dial)
			if once {
				if dial || NotRun(c, err) {
					t.Errorf("Once XADD: %v; want the lost connection itself, which NotRun refuses", err)
				}
			} else {
				if !dial {
					t.Skipf("go-redis returned %v, not a dial error: the scenario did not arise", err)
				}
				if !NotRun(c, err) {
					t.Errorf("retried XADD: NotRun false on %v; want true: the last try's error hides the appended entry", err)
				}
			}
		})
	}
}
