package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestCLIDocsListEveryCommand keeps docs/cli.md from drifting: every
// command must appear there, and every command must have examples.
func TestCLIDocsListEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Runnable() {
				if !strings.Contains(string(doc), "`"+sub.CommandPath()) {
					t.Errorf("docs/cli.md does not mention %q", sub.CommandPath())
				}
				if sub.Example == "" {
					t.Errorf("%q has no examples in --help", sub.CommandPath())
				}
			}
			walk(sub)
		}
	}
	walk(NewCmdRoot(NewSystemFactory()))
}
