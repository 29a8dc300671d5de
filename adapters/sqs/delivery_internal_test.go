package sqs

import (
	"testing"
	"time"
)

// TestNextRefreshNeverAtOnce: a waiting message is hidden again half a visibility timeout after
// its invisibility began; when that moment has passed (the last refresh failed, so hiddenUntil
// did not move) the next one still waits a quarter of the timeout instead of following at once.
func TestNextRefreshNeverAtOnce(t *testing.T) {
	const vt = 4 * time.Second
	var d delivery
	d.hiddenUntil.Store(time.Now().Add(vt).UnixNano()) // just hidden
	if got := d.nextRefresh(vt); got < vt/2-100*time.Millisecond || got > vt/2 {
		t.Errorf("just hidden: next refresh in %s, want about %s", got, vt/2)
	}
	d.hiddenUntil.Store(time.Now().Add(-10 * time.Second).UnixNano()) // the refresh is overdue
	if got := d.nextRefresh(vt); got != vt/4 {
		t.Errorf("overdue: next refresh in %s, want %s", got, vt/4)
	}
}
