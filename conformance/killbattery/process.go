package killbattery

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// child is one consumer process: the test binary itself, re-executed to run only the test that
// called Run (so no package needs a separate main to build), with ChildEnv set.
type child struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // Wait's error, once done is closed
}

// startChild starts a child for spec, its stdout and stderr going to logPath.
func startChild(spec childSpec, logPath string) (*child, error) {
	env, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("killbattery: child log: %w", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run="+runPattern(spec.Test), "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(env))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("killbattery: start child: %w", err)
	}
	c := &child{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = out.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// kill sends SIGKILL and waits for the process to be gone. It reports false if the process had
// already exited on its own (a crash, or a failed start), which the caller must treat as a
// failure: that child was not killed at a moment the battery chose.
func (c *child) kill() bool {
	select {
	case <-c.done:
		return false
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	return true
}

// stop sends SIGTERM and waits up to timeout for a clean exit; past it, it kills the process.
func (c *child) stop(timeout time.Duration) error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.kill()
		return fmt.Errorf("killbattery: child %d did not stop within %s of SIGTERM (killed)", c.pid(), timeout)
	}
	if c.err != nil {
		return fmt.Errorf("killbattery: child %d exited with %v", c.pid(), c.err)
	}
	return nil
}

// exitedEarly describes a child that exited before it was killed, for the failure message.
func (c *child) exitedEarly() error {
	return fmt.Errorf("killbattery: child %d exited on its own (%v) before it was killed; its log:\n%s", c.pid(), c.err, tail(c.log, 40))
}

// runPattern is the -test.run value that selects exactly the test (or subtest) named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// childTrouble scans a child's log for what a SIGKILL would otherwise hide: a data race the
// race detector reported, or a panic.
func childTrouble(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, sign := range []string{"WARNING: DATA RACE", "panic: ", "fatal error: "} {
		if strings.Contains(string(data), sign) {
			return errors.New("killbattery: child log " + path + " reports " + strings.TrimSpace(sign) + ":\n" + tail(path, 60))
		}
	}
	return nil
}
