package idempotency

import (
	"strings"
	"testing"

	"github.com/millrace/millrace/internal/redisslot"
)

// The lease record and the fan-out set of a key hash to one slot whatever the key holds, and
// different keys never share record names. Keys are user input (KeyFromMetadata, custom ids):
// "}x" used to put the two records in slots 11047 and 9103 (checked with CLUSTER KEYSLOT on a
// cluster-enabled redis-server), and MarkSent failed with CROSSSLOT.
func TestRecordNamesShareASlotForHostileKeys(t *testing.T) {
	o := StoreOptions{}.withDefaults()
	keys := []string{"}", "}x", "{}", "{", "}{", "{}}", "~", "~}x", "~~", "a}b", "x{y}z", "\x00\xff}",
		strings.Repeat("}", 10000), strings.Repeat("k", 1<<16), "plain"}
	names := map[string]string{}
	for _, k := range keys {
		p, s := o.processedKey(k), o.sentKey(k)
		if ps, ss := redisslot.Of(p), redisslot.Of(s); ps != ss {
			t.Errorf("key %.20q: %s in slot %d, %s in slot %d", k, p[:min(len(p), 40)], ps, s[:min(len(s), 40)], ss)
		}
		if other, dup := names[p]; dup {
			t.Errorf("keys %.20q and %.20q share the record name %.40q", k, other, p)
		}
		names[p] = k
	}
	if got := o.processedKey("plain"); got != "millrace:processed:{plain}" {
		t.Errorf("an ordinary key's record name changed: %q", got)
	}
}
