package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
		{"unknown scheme", planOptions{specFile: fieldReportSpec, urls: []string{"nats://127.0.0.1:4222"}}, `unknown URL scheme "nats"`},
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

// TestPlanExitStatus runs the whole command line: exit status, stdout and one line on stderr.
func TestPlanExitStatus(t *testing.T) {
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := newApp().run(context.Background(), append([]string{"plan"}, args...), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
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
	if _, errOut, code := run("--spec", fieldReportSpec, "--json", "nats://h"); code != 2 || !strings.HasPrefix(errOut, `{"error":`) {
		t.Errorf("--json, unknown scheme: exit %d, stderr %q", code, errOut)
	}
}
