package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// findCmd returns the command at path under a fresh root.
func findCmd(t *testing.T, path ...string) *cobra.Command {
	t.Helper()
	cmd, _, err := NewCmdRoot(newTestFactory(t, nil).Factory).Find(path)
	if err != nil {
		t.Fatalf("find %v: %v", path, err)
	}
	return cmd
}

// TestREADMEListsEveryServerAndWorkerFlag keeps the README's configuration
// tables from drifting: every flag of `outpost server` and `outpost worker
// start` (hidden spellings aside) has a row naming it.
func TestREADMEListsEveryServerAndWorkerFlag(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, doc, _ = strings.Cut(doc, "\n## Configuration\n")
	serverTable, workerTable, ok := strings.Cut(doc, "\n`outpost worker start`:\n")
	if !ok {
		t.Fatal("README.md has no `outpost worker start`: table under ## Configuration")
	}
	workerTable, _, _ = strings.Cut(strings.TrimLeft(workerTable, "\n"), "\n\n")
	for _, c := range []struct {
		path  []string
		table string
	}{{[]string{"server"}, serverTable}, {[]string{"worker", "start"}, workerTable}} {
		// A row's first cell names the flag, maybe beside others or with
		// its older spelling: "| `--run-as`, `--run-as-home` |".
		var firstCells []string
		for _, line := range strings.Split(c.table, "\n") {
			if cells := strings.Split(line, "|"); len(cells) > 2 && cells[0] == "" {
				firstCells = append(firstCells, cells[1])
			}
		}
		findCmd(t, c.path...).LocalFlags().VisitAll(func(fl *pflag.Flag) {
			if fl.Hidden || fl.Name == "help" {
				return
			}
			for _, cell := range firstCells {
				if strings.Contains(cell, "`--"+fl.Name+"`") || strings.Contains(cell, "`--"+fl.Name+" ") {
					return
				}
			}
			t.Errorf("README.md's table of `outpost %s` has no row naming --%s", strings.Join(c.path, " "), fl.Name)
		})
	}
}

// TestServerHelpListsItsEnv: the list of variables in `outpost server
// --help` names every variable the server reads (a family such as
// OUTPOST_LLM_* stands for its members).
func TestServerHelpListsItsEnv(t *testing.T) {
	t.Parallel()
	long := findCmd(t, "server").Long
	for _, v := range serverEnv {
		named := strings.Contains(long, v.Name)
		for _, fam := range envName.FindAllString(long, -1) {
			named = named || strings.HasSuffix(fam, "_") && strings.HasPrefix(v.Name, fam)
		}
		if !named {
			t.Errorf("outpost server --help does not name %s (%s)", v.Name, v.Meaning)
		}
	}
}

// checklistItem is an item of docs/replicas.md's checklist: "N. **…" up to
// the first code span, whose first word is the flag or variable it sets.
var checklistItem = regexp.MustCompile("(?m)^[0-9]+\\. \\*\\*[^`\\n]*`([^` ]+)")

// TestServerHelpCoversReplicasChecklist: what `outpost server --help` says
// about replicas names each flag and variable of docs/replicas.md's
// checklist, and does not call replicas unsupported.
func TestServerHelpCoversReplicasChecklist(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/replicas.md")
	if err != nil {
		t.Fatal(err)
	}
	items := checklistItem.FindAllStringSubmatch(string(doc), -1)
	if len(items) < 5 {
		t.Fatalf("found %d checklist items in docs/replicas.md; the pattern no longer matches the page", len(items))
	}
	long := findCmd(t, "server").Long
	for _, m := range items {
		if !strings.Contains(long, m[1]) {
			t.Errorf("outpost server --help does not name %s, which every replica needs (docs/replicas.md's checklist)", m[1])
		}
	}
	if strings.Contains(long, "not supported") || !strings.Contains(long, "docs/replicas.md") {
		t.Errorf("outpost server --help should say replicas work and point to docs/replicas.md:\n%s", long)
	}
}
