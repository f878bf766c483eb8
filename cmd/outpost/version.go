package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// version is set at build time:
// go build -ldflags "-X main.version=v1.2.3" ./cmd/outpost
var version = "dev"

// NewCmdVersion returns `outpost version`.
func NewCmdVersion(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of outpost",
		Example: "  outpost version\n  outpost version -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.JSON() {
				return printJSON(f.IO.Out, map[string]string{
					"version": version, "go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH,
				})
			}
			fmt.Fprintf(f.IO.Out, "outpost %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
