// Command outpost-operator is Outpost's Kubernetes operator: it serves
// OutpostPools (outpost.dev/v1alpha1) with a pod per session. It is a
// program of its own, which `outpost operator` runs, so that the Kubernetes
// client libraries (hundreds of packages, and their start-up) stay out of
// the outpost binary that every worker, remote and client runs. Run
// `outpost-operator --help` for its flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time (-X main.version=…).
var version = "dev"

// Exit codes, as the outpost command's.
const (
	exitOK    = 0
	exitUsage = 2
	exitError = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful stop, a second one kills.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run runs the operator command with args and returns the exit code;
// errors go to errOut as one sentence.
func run(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	cmd := newCmd(getenv, errOut, nil)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	err := cmd.ExecuteContext(ctx)
	switch {
	case err == nil, errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return exitOK
	case isUsage(err):
		fmt.Fprintf(errOut, "error: %s\nRun 'outpost-operator --help' for usage.\n", err)
		return exitUsage
	}
	fmt.Fprintf(errOut, "error: %s\n", err)
	return exitError
}

// usageError is a mistake in how the command was called.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// isUsage recognizes usage errors, cobra's own among them.
func isUsage(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return true
	}
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag")
}
