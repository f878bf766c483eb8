//go:build unix

package worker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"time"
)

// In user isolation, session code runs as the run-as user outside any
// sandbox, so a process a session leaves behind outlives it: it could
// watch the next session, or race the root worker while it gives the user
// its files. The run-as user is dedicated to this worker's sessions, and
// the worker ends every process of that user before it touches the user's
// files: at start, and after each session's remote exits.

// endProcessesTimeout bounds how long the worker waits for the run-as
// user's processes to be gone after SIGKILL.
const endProcessesTimeout = 10 * time.Second

// endProcessesEvery is how often the wait checks, and signals again.
const endProcessesEvery = 50 * time.Millisecond

// endProcesses kills every process of u and waits until none is left (as
// far as this system lists processes). It returns how many there were.
//
// The kill is kill(-1, SIGKILL) by a process running as u: the kernel
// signals every process of u at once, so none can escape by forking while
// they are ended one by one.
func (u *sessionUser) endProcesses(ctx context.Context) (int, error) {
	found := userProcesses(u.uid)
	ctx, cancel := context.WithTimeout(ctx, endProcessesTimeout)
	defer cancel()
	tick := time.NewTicker(endProcessesEvery)
	defer tick.Stop()
	for {
		if err := u.killAll(ctx); err != nil {
			return len(found), err
		}
		left := userProcesses(u.uid)
		for _, p := range left {
			if !slices.Contains(found, p) {
				found = append(found, p)
			}
		}
		if len(left) == 0 {
			return len(found), nil
		}
		select {
		case <-ctx.Done():
			return len(found), fmt.Errorf("processes of the run-as user %s still run after SIGKILL (pids %v): %w", u.name, left, ctx.Err())
		case <-tick.C:
		}
	}
}

// killAll runs kill(-1, SIGKILL) as u: every process u may signal but the
// killing one itself.
func (u *sessionUser) killAll(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "kill -9 -1 2>/dev/null")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = u.sysProcAttr()
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil // no process left to signal
	}
	if err != nil {
		return fmt.Errorf("end the processes of the run-as user %s: %w", u.name, err)
	}
	return nil
}
