package killbattery

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseLedger(t *testing.T) {
	data := "C a 1 7\nC b 1 7\nD a 1 7 retry\nC a 2 8\nD a 2 8 success\nC c 1 8\nD c 1"
	got, err := parseLedger([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []call{{"a", 1, 7, outcomeRetry}, {"b", 1, 7, interrupted}, {"a", 2, 8, outcomeSuccess}, {"c", 1, 8, interrupted}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %+v, want %+v (the torn last line ignored)", got, want)
	}
	for _, bad := range []string{"D a 1 7 success\n", "C a x 7\n", "X a 1 7\n", "C a 1\n", "C a 1 7 extra\n"} {
		if _, err := parseLedger([]byte(bad)); err == nil {
			t.Errorf("ledger %q parsed, want an error", bad)
		}
	}
}

// TestLedgerWriterAndTail: what the child writes the parent reads back, and the tail counts
// started calls as they are appended, a line split across reads included.
func TestLedgerWriterAndTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	w, err := openLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	tail, err := tailLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.close()
	if err := w.called("u", 1); err != nil {
		t.Fatal(err)
	}
	if n, err := tail.started(); err != nil || n != 1 {
		t.Fatalf("started %d, %v; want 1", n, err)
	}
	if err := w.returned("u", 1, outcomeSuccess); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("C v 1 "); err != nil {
		t.Fatal(err)
	}
	if n, _ := tail.started(); n != 1 {
		t.Fatalf("started %d after a partial line, want 1", n)
	}
	if _, err := f.WriteString("9\n"); err != nil {
		t.Fatal(err)
	}
	if n, _ := tail.started(); n != 2 {
		t.Fatalf("started %d after the line was completed, want 2", n)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	calls, err := parseLedger(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []call{{"u", 1, os.Getpid(), outcomeSuccess}, {"v", 1, 9, interrupted}}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("calls %+v, want %+v", calls, want)
	}
}
