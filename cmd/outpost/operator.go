package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"
)

// operatorProgram is the program `outpost operator` runs. The operator is a
// binary of its own (cmd/outpost-operator) so that the Kubernetes client
// libraries stay out of this one: linked in, their package initialisation
// made every outpost process — each session's remote among them — start
// about 15 ms later.
const operatorProgram = "outpost-operator"

// NewCmdOperator returns `outpost operator`, which runs outpost-operator
// with its arguments. lookPath finds the program (nil: findOperator).
func NewCmdOperator(f *Factory, lookPath func() (string, error)) *cobra.Command {
	if lookPath == nil {
		lookPath = findOperator
	}
	return &cobra.Command{
		Use:   "operator [flags]",
		Short: "Serve OutpostPools in a Kubernetes cluster, a pod per session",
		Long: `Run the Kubernetes operator, the program outpost-operator (installed next to
outpost by make install and in the container image), with these arguments:
for each OutpostPool (outpost.dev/v1alpha1) it claims up to
maxConcurrentSessions sessions of the pool's outpost and gives each a Pod of
its own. See docs/kubernetes.md; "outpost operator --help" shows its flags.`,
		Example:            `  outpost operator --default-api-url https://outpost.example.com --namespace agents`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := lookPath()
			if err != nil {
				return err
			}
			return runProgram(cmd.Context(), f, path, args)
		},
	}
}

// findOperator looks for outpost-operator next to this executable, then
// on PATH.
func findOperator() (string, error) {
	name := operatorProgram
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", codeError{exitError, fmt.Errorf("outpost operator runs the program %s, which is neither next to this executable nor on PATH: "+
		"install it with make install (or build it with go build ./cmd/outpost-operator), or use the container image, which has both", name)}
}

// runProgram runs path with args, passing the signals that stop outpost
// on to it, and returns its exit status as this command's.
func runProgram(ctx context.Context, f *Factory, path string, args []string) error {
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f.IO.In, f.IO.Out, f.IO.ErrOut
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", path, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return programExit{ee.ExitCode()}
	}
	return err
}
