package redisslot_test

import (
	"testing"

	"github.com/millrace/millrace/internal/redisslot"
)

// The values of the Redis Cluster specification.
func TestOf(t *testing.T) {
	for key, want := range map[string]uint16{"somekey": 11058, "foo{hash_tag}": 2515, "hash_tag": 2515, "foo{}{bar}": 8363, "foo{{bar}}": 4015} {
		if got := redisslot.Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}
