package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time:
// go build -ldflags "-X main.version=v1.2.3" ./cmd/outpost
var version = "dev"

// VersionOptions are the settings of `outpost version`.
type VersionOptions struct {
	f *Factory
}

// NewCmdVersion returns `outpost version`. runF replaces the run in tests.
func NewCmdVersion(f *Factory, runF func(context.Context, *VersionOptions) error) *cobra.Command {
	opts := &VersionOptions{f: f}
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of outpost",
		Example: "  outpost version\n  outpost version -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runVersion(cmd.Context(), opts)
		},
	}
}

func runVersion(_ context.Context, opts *VersionOptions) error {
	f := opts.f
	if f.JSON() {
		return printJSON(f.IO.Out, map[string]string{
			"version": version, "go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH,
		})
	}
	fmt.Fprintln(f.IO.Out, versionLine())
	return nil
}

// versionLine is the build's version as `outpost version` prints it.
func versionLine() string {
	return fmt.Sprintf("outpost %s (%s, %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// withVersionFlag gives cmd a --version that prints versionLine and exits
// 0: setup scripts written for the public remote check the build with
// `devin-remote --version`.
func withVersionFlag(cmd *cobra.Command) *cobra.Command {
	cmd.Version = version
	// A template, so no braces of the version may reach it.
	cmd.SetVersionTemplate(strings.NewReplacer("{", "{{`{`}}", "}", "{{`}`}}").Replace(versionLine()) + "\n")
	return cmd
}
