package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"
)

// envRunMain makes the test binary run the CLI's main instead of the tests: runMain starts the
// binary again with it, so that a test sees the real process (newApp, its process-wide loggers,
// os.Stderr) and not only app.run.
const envRunMain = "MILLRACE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main() // exits
	}
	os.Exit(m.Run())
}

// runMain runs `millrace args...` as its own process, with the test's environment plus env.
func runMain(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envRunMain+"=1"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run millrace %q: %v", args, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}
