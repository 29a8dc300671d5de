package kafka_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/internal/benchround"
)

var cpuScan = flag.String("kafka.cpuscan", "1000,3000,10000,30000", "BenchmarkFailingRecordCPUScan: run sizes, comma-separated")

// BenchmarkFailingRecordCPUScan shows how the CPU per failing record that BenchmarkRetryIsolation
// reports depends on the run's size: for each size of -kafka.cpuscan it runs, -kafka.rounds
// times in turn, the all-failing workload (every record fails once; CPU to the first retry, per
// record: benchRun.cpuPerFailing) and the all-healthy one (CPU per record), and prints both as
// benchround lines, µs per record, min / median / max. A short run shares each transaction and
// each fetch of the retry topic among fewer records. Not run by tools/bench.
//
//	source .ci/services/kafka.sh
//	go test ./adapters/kafka/ -run '^$' -bench FailingRecordCPUScan -benchtime 1x -kafka.rounds 5
func BenchmarkFailingRecordCPUScan(b *testing.B) {
	for range b.N {
		for _, s := range strings.Split(*cpuScan, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				b.Fatalf("-kafka.cpuscan: %q", s)
			}
			var failing, healthy []float64
			for range max(*benchRounds3k, 1) {
				f := benchMillraceIn(b, n, failAll, false)
				h := benchMillraceIn(b, n, allHealthy, false)
				failing = append(failing, float64(f.cpuPerFailing)/float64(time.Microsecond))
				healthy = append(healthy, float64(h.cpuPerRecord)/float64(time.Microsecond))
			}
			for _, x := range []struct {
				name string
				xs   []float64
			}{{"cpu_failing_record", failing}, {"cpu_millrace_all_healthy", healthy}} {
				lo, med, hi := benchround.Stats(x.xs)
				fmt.Println(benchround.Line(b.Name(), fmt.Sprintf("%s@records=%d", x.name, n), "µs/record", lo, med, hi, len(x.xs), ""))
			}
		}
	}
}
