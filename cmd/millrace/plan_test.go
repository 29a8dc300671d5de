package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/plan"
)

const (
	fieldReportSpec = "testdata/plan/fieldreport.spec"
	planKafkaURL    = "kafka://127.0.0.1:19092?group=notification"
	planSQSURL      = "sqs+http://127.0.0.1:19324?visibility=60s"
)

// planRun runs the plan command's core on o and returns its output and error.
func planRun(t *testing.T, o planOptions) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := newApp().runPlan(context.Background(), o, strings.NewReader(""), &out)
	return out.String(), err
}

// TestPlanFieldReport is issue 14's case: the field report's policy with its 104 s budget
// names the conflict with SQS's 60 s visibility timeout; with 50 s, Kafka and SQS give up
// within a second of each other.
func TestPlanFieldReport(t *testing.T) {
	out, err := planRun(t, planOptions{specFile: fieldReportSpec, urls: []string{planKafkaURL, planSQSURL}})
	if !errors.Is(err, errPlanFailed) {
		t.Fatalf("budget 104s: err %v, want the plan to fail\n%s", err, out)
	}
	for _, want := range []string{
		"FAIL  visibility timeout whole seconds",
		"sqs.Config.ProcessingBudget = 1m44s: must be at most sqs.Config.VisibilityTimeout (1m0s) minus 1s",
		"result: FAIL (1 rule failed)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The refused configuration's values are not shown as if they held: SQS bounds a handler
	// at its visibility timeout less the margin, not at the refused 104 s.
	_, sqsPart, _ := strings.Cut(out, "\n"+planSQSURL+" (sqs)\n")
	sqsPart, table, _ := strings.Cut(sqsPart, "where the brokers differ")
	if !strings.HasPrefix(sqsPart, "  topology: invalid: see rules\n  give-up: invalid: see rules\n") || strings.Contains(sqsPart, "VisibilityTimeout=") {
		t.Errorf("SQS section shows a plan that would not run:\n%s", sqsPart)
	}
	if !regexp.MustCompile(`processing budget bound +none: a slow handler keeps its message +59s \(visibility timeout 1m0s minus 1s\)`).MatchString(table) ||
		!regexp.MustCompile(`give-up time +4m0s to 12m40s +invalid: see rules`).MatchString(table) || strings.Contains(table, "1m44s") {
		t.Errorf("differences table:\n%s", table)
	}
	if !strings.Contains(err.Error(), "sqs+http://127.0.0.1:19324?visibility=60s: millrace: invalid configuration: sqs.Config.ProcessingBudget = 1m44s") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line naming the conflict: %q", err)
	}

	out, err = planRun(t, planOptions{specFile: fieldReportSpec, set: [][2]string{{"budget", "50s"}}, json: true,
		urls: []string{planKafkaURL, planSQSURL}})
	if err != nil {
		t.Fatalf("budget 50s: %v\n%s", err, out)
	}
	var r plan.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	k, s := r.Brokers[0].GiveUp, r.Brokers[1].GiveUp
	if r.Brokers[0].Broker != "kafka" || r.Brokers[1].Broker != "sqs" {
		t.Fatalf("brokers %s, %s", r.Brokers[0].Broker, r.Brokers[1].Broker)
	}
	within := func(a, b plan.Duration) bool { d := time.Duration(a - b); return d <= time.Second && d >= -time.Second }
	if !within(k.Min, s.Min) || !within(k.Max, s.Max) || time.Duration(k.Min) != 4*time.Minute || time.Duration(k.Max) != 8*time.Minute+10*time.Second {
		t.Errorf("give-up kafka %s, sqs %s: want both 4m0s to 8m10s", k, s)
	}
	var diffs []string
	for _, d := range r.Differences {
		diffs = append(diffs, d.Trait)
	}
	for _, want := range []string{plan.TraitRetry, plan.TraitAttempts, plan.TraitLastError, plan.TraitPayload, plan.TraitUnacked, plan.TraitDelays, plan.TraitConcurrency} {
		if !strings.Contains(strings.Join(diffs, "|"), want) {
			t.Errorf("differences %q lack %q", diffs, want)
		}
	}
}

func TestPlanUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    planOptions
		want string
	}{
		{"no URL", planOptions{specFile: fieldReportSpec}, "at least one broker URL"},
		{"no topic", planOptions{set: [][2]string{{"attempts", "3"}}, urls: []string{planKafkaURL}}, "needs a topic"},
		{"no attempts", planOptions{set: [][2]string{{"topic", "t"}}, urls: []string{planKafkaURL}}, "number of attempts"},
		{"bad setting", planOptions{specFile: "testdata/plan/bad.spec", urls: []string{planKafkaURL}}, `line 2: unknown setting "colour"`},
		{"missing file", planOptions{specFile: "testdata/plan/none.spec", urls: []string{planKafkaURL}}, "--spec: open testdata/plan/none.spec"},
		{"bad backoff", planOptions{specFile: fieldReportSpec, set: [][2]string{{"backoff", "soon"}}, urls: []string{planKafkaURL}}, `backoff "soon"`},
		{"bad policy", planOptions{specFile: fieldReportSpec, set: [][2]string{{"backoff", "exponential:initial=1m,max=1s"}}, urls: []string{planKafkaURL}},
			"RetryPolicy.Backoff.Max"},
		{"unknown scheme", planOptions{specFile: fieldReportSpec, urls: []string{"mqtt://127.0.0.1:1883"}}, `unknown URL scheme "mqtt"`},
		{"unknown parameter", planOptions{specFile: fieldReportSpec, urls: []string{"kafka://127.0.0.1:19092?colour=red"}}, "does not take colour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := planRun(t, tc.o)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

// planCommand runs `millrace plan args...` on the command tree and returns stdout and the error.
func planCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newApp().newRoot()
	var out, errOut bytes.Buffer
	root.SetArgs(append([]string{"plan"}, args...))
	root.SetIn(strings.NewReader(""))
	root.SetOut(&out)
	root.SetErr(&errOut)
	_, err := root.ExecuteContextC(context.Background())
	return out.String(), err
}

// TestPlanCommandFlags: flags override the spec file, and the command line reaches runPlan.
func TestPlanCommandFlags(t *testing.T) {
	out, err := planCommand(t, "--spec", fieldReportSpec, "--budget", "50s", planKafkaURL, planSQSURL)
	if err != nil || !strings.Contains(out, "plan for push.requested: 5 attempts, fixed 1m0s, budget 50s, lease 2m0s") ||
		strings.Count(out, "give-up: 4m0s to 8m10s") != 2 || !strings.Contains(out, "result: ok") {
		t.Fatalf("err %v\n%s", err, out)
	}
	out, err = planCommand(t, "--topic", "orders", "--attempts", "3", "--backoff", "delays:10s,1m", "--json", planKafkaURL)
	var r plan.Report
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.Spec.Topic != "orders" || len(r.Brokers[0].Steps) != 2 {
		t.Fatalf("flags only: err %v\n%s", err, out)
	}
	if _, err := planCommand(t, "--spec", fieldReportSpec, planKafkaURL, planSQSURL); !errors.Is(err, errPlanFailed) {
		t.Errorf("budget 104s: %v, want the plan to fail", err)
	}
	if _, err := planCommand(t, "--attempts", "many", "--topic", "t", planKafkaURL); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `attempts "many"`) {
		t.Errorf("--attempts many: %v", err)
	}
}

// runPlanLine runs `millrace plan args...` as main does and returns stdout, stderr and the exit
// status.
func runPlanLine(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := newApp().run(context.Background(), append([]string{"plan"}, args...), strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestPlanExitStatus runs the whole command line: exit status, stdout and one line on stderr.
func TestPlanExitStatus(t *testing.T) {
	run := runPlanLine
	if out, errOut, code := run("--spec", fieldReportSpec, "--budget", "50s", planKafkaURL, planSQSURL); code != 0 || errOut != "" || !strings.Contains(out, "result: ok") {
		t.Errorf("budget 50s: exit %d, stderr %q\n%s", code, errOut, out)
	}
	out, errOut, code := run("--spec", fieldReportSpec, planKafkaURL, planSQSURL)
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "sqs.Config.ProcessingBudget = 1m44s") || !strings.Contains(out, "result: FAIL") {
		t.Errorf("budget 104s: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if _, errOut, code := run("--spec", fieldReportSpec); code != 2 || !strings.Contains(errOut, "at least one broker URL") {
		t.Errorf("no URL: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := run("--spec", fieldReportSpec, "--json", "mqtt://h"); code != 2 || !strings.HasPrefix(errOut, `{"error":`) {
		t.Errorf("--json, unknown scheme: exit %d, stderr %q", code, errOut)
	}
}

// TestPlanCheckUnreachable: one broker that cannot be reached does not hide the others' results:
// the whole report is printed (text and JSON) with that broker marked as not checked, its URL
// named once, and the exit status is 1.
func TestPlanCheckUnreachable(t *testing.T) {
	const down = "redis://127.0.0.1:1"
	topic := fmt.Sprintf("plan-unreachable-%d", time.Now().UnixNano()) // no such topics on kfake: 3 mismatches
	args := []string{"--spec", fieldReportSpec, "--budget", "50s", "--topic", topic, "--check", planKafkaURL, down}

	out, errOut, code := runPlanLine(args...)
	if code != 1 || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, down) != 1 || !strings.Contains(errOut, "could not be checked: connect to "+down) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	kafkaPart, downPart, ok := strings.Cut(out, "\n"+down+" (redisstream)\n")
	if !ok || !strings.Contains(kafkaPart, "  check: 3 mismatches\n") || !strings.Contains(kafkaPart, "MISMATCH  topic "+topic+".retry: existence") {
		t.Errorf("the Kafka results are not all there:\n%s", out)
	}
	if line := regexp.MustCompile(`(?m)^  check: .*$`).FindString(downPart); !strings.HasPrefix(line, "  check: could not be checked: connect to "+down+": ") ||
		strings.Count(line, down) != 1 {
		t.Errorf("unreachable broker's check line %q:\n%s", line, downPart)
	}
	if !strings.Contains(out, "result: FAIL (3 live settings differ from the plan, 1 broker could not be checked)") {
		t.Errorf("result line:\n%s", out)
	}

	out, errOut, code = runPlanLine(append(args, "--json")...)
	var r plan.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.OK || len(r.Brokers) != 2 {
		t.Fatalf("--json: exit %d, %v, stderr %q\n%s", code, err, errOut, out)
	}
	if k := r.Brokers[0]; !k.Checked || len(k.Mismatches) != 3 || k.CheckError != "" {
		t.Errorf("--json: Kafka %+v", k)
	}
	if d := r.Brokers[1]; d.Checked || !strings.HasPrefix(d.CheckError, "connect to "+down+": ") {
		t.Errorf("--json: unreachable broker checked %v, check_error %q", d.Checked, d.CheckError)
	}
	if !strings.HasPrefix(errOut, `{"error":`) || strings.Count(errOut, down) != 1 {
		t.Errorf("--json stderr %q", errOut)
	}
}

// TestPlanErrorText: a usage error reads as its cause, without the internal usage marker, in
// text and in JSON; planning SQS without a budget says what sets one.
func TestPlanErrorText(t *testing.T) {
	_, errOut, code := runPlanLine("--spec", fieldReportSpec, "--json", "kafka://[x")
	var e struct {
		Error string `json:"error"`
		Exit  int    `json:"exit"`
	}
	if err := json.Unmarshal([]byte(errOut), &e); err != nil || code != 2 || e.Exit != 2 ||
		!strings.HasPrefix(e.Error, "brokerurl: invalid URL: kafka://[x") || strings.Contains(e.Error, "usage") {
		t.Errorf("--json bad URL: exit %d, %v, stderr %q", code, err, errOut)
	}
	_, errOut, code = runPlanLine("--spec", fieldReportSpec, "kafka://[x")
	if code != 2 || !strings.HasPrefix(errOut, "millrace: brokerurl: invalid URL: kafka://[x") {
		t.Errorf("bad URL: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = runPlanLine("--topic", "t", "--attempts", "3", "--backoff", "10s", "--json", "sqs+http://127.0.0.1:19324?visibility=60s")
	if err := json.Unmarshal([]byte(errOut), &e); err != nil || code != 2 || !strings.Contains(e.Error, "--budget") ||
		!strings.Contains(e.Error, "processing_budget") || strings.HasPrefix(e.Error, "usage") {
		t.Errorf("SQS without a budget: exit %d, %v, stderr %q", code, err, errOut)
	}
	for _, args := range [][]string{{"--topic", "t", "--json", planKafkaURL}, {"--spec", "testdata/plan/bad.spec", "--json", planKafkaURL}} {
		if _, errOut, code := runPlanLine(args...); code != 2 || !strings.HasPrefix(errOut, `{"error":`) || strings.Contains(errOut, `"usage`) {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestOneLineUsageMarker: the usage marker chooses the exit status only; the message never
// shows it, wherever an error wrapped it.
func TestOneLineUsageMarker(t *testing.T) {
	cause := errors.New("brokerurl: invalid URL: kafka://[x: missing ']' in host")
	for _, err := range []error{fmt.Errorf("%w: %w", cause, errUsage), fmt.Errorf("%w: %w", errUsage, cause)} {
		if got := oneLine(err); got != cause.Error() {
			t.Errorf("oneLine(%q) = %q, want %q", err, got, cause)
		}
	}
}
