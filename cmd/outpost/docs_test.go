package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
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

// TestOrchestrationDocsListEveryEnvName keeps the table of variables in
// docs/orchestration.md true: each variable of the spawn contract and of
// `worker start` has a row naming both its names.
func TestOrchestrationDocsListEveryEnvName(t *testing.T) {
	doc, err := os.ReadFile("../../docs/orchestration.md")
	if err != nil {
		t.Fatal(err)
	}
	name := func(n string) string {
		if n == "" {
			return "—"
		}
		return "`" + n + "`"
	}
	for _, v := range append(slices.Clone(api.SpawnEnv), api.WorkerEnv...) {
		row := "| " + name(v.Name) + " | " + name(v.Public) + " |"
		found := false
		for _, line := range strings.Split(string(doc), "\n") {
			found = found || strings.HasPrefix(line, row)
		}
		if !found {
			t.Errorf("docs/orchestration.md has no table row starting %q", row)
		}
	}
}
