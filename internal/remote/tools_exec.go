package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/steptrace"
)

const (
	// defaultExecTimeout applies when neither the arguments nor the call
	// set a timeout.
	defaultExecTimeout = 600 * time.Second
	// pipeWaitDelay is how long output pipes are drained after the command
	// exits (background children may hold them open).
	pipeWaitDelay = 2 * time.Second
)

func runExec(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ExecArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if (a.Command == "") == (len(a.Argv) == 0) {
		return nil, errors.New("bad arguments: set exactly one of command and argv")
	}
	if len(a.Argv) > 0 && a.Argv[0] == "" {
		return nil, errors.New("bad arguments: argv[0] is empty")
	}
	if a.TimeoutS < 0 {
		return nil, errors.New("bad arguments: timeout_s must not be negative")
	}
	timeout := defaultExecTimeout
	switch {
	case a.TimeoutS > 0:
		timeout = time.Duration(a.TimeoutS) * time.Second
	case c.timeout > 0:
		timeout = c.timeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if err := checkShell(a.Shell); err != nil {
		return nil, err
	}
	if a.Shell != "" && a.Command == "" {
		return nil, errors.New("bad arguments: shell applies to command, not to argv")
	}
	var cmd *exec.Cmd
	if a.Command != "" {
		var err error
		if cmd, err = shellCommand(tctx, a.Shell, a.Command); err != nil {
			return nil, err
		}
	} else {
		cmd = exec.CommandContext(tctx, a.Argv[0], a.Argv[1:]...)
	}
	cmd.Dir = c.path(a.Cwd)
	cmd.Env = mergeEnv(c.env, a.Env)
	if a.Stdin != "" {
		cmd.Stdin = strings.NewReader(a.Stdin)
	}
	cmd.Stdout = c.stdout
	cmd.Stderr = c.stderr
	cmd.WaitDelay = pipeWaitDelay
	killProcessGroup(cmd)

	start := time.Now()
	steptrace.Mark("remote.exec_start", "")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	release := groupStarted(cmd)
	err := cmd.Wait()
	release()
	c.flush()
	res := api.ExecResult{
		ExitCode:    -1,
		DurationMS:  time.Since(start).Milliseconds(),
		OutputBytes: c.stdout.written() + c.stderr.written(),
		Tail:        c.tail.String(),
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, errors.New("cancelled")
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		res.TimedOut = true
		return res, fmt.Errorf("timed out after %s", timeout)
	case err == nil, errors.Is(err, exec.ErrWaitDelay), errors.As(err, &ee):
	default:
		return res, fmt.Errorf("wait for command: %w", err)
	}
	switch {
	case res.ExitCode == 0:
		return res, nil
	case res.ExitCode < 0:
		return res, fmt.Errorf("killed: %s", cmd.ProcessState)
	default:
		return res, fmt.Errorf("exit code %d", res.ExitCode)
	}
}
