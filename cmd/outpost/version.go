package main

import (
	"context"
	"fmt"
	"runtime"

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
	fmt.Fprintf(f.IO.Out, "outpost %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
