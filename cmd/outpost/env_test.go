package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envName matches an environment variable's name, or a family of them
// ("OUTPOST_LLM_*", "DEVIN_...") ending in "_".
var envName = regexp.MustCompile(`\b(?:OUTPOST|DEVIN)_[A-Z0-9_]*`)

// TestHelpNamesKnownEnv: every variable a help text names (a command's
// Short, Long and Example, a flag's usage) is one the command reads, in
// cliEnv; a family such as OUTPOST_LLM_* has a member there.
func TestHelpNamesKnownEnv(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, v := range cliEnv {
		for _, n := range v.Names() {
			known[n] = true
		}
	}
	isKnown := func(name string) bool {
		if !strings.HasSuffix(name, "_") {
			return known[name]
		}
		for n := range known {
			if strings.HasPrefix(n, name) {
				return true
			}
		}
		return false
	}
	checked := 0
	check := func(where, text string) {
		for _, name := range envName.FindAllString(text, -1) {
			checked++
			if !isKnown(name) {
				t.Errorf("%s names %s, which is not in cliEnv (env.go, or api's EnvVar tables)", where, name)
			}
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		check(path+" Short", c.Short)
		check(path+" Long", c.Long)
		check(path+" Example", c.Example)
		visit := func(fl *pflag.Flag) { check(path+" --"+fl.Name, fl.Usage) }
		c.LocalFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewCmdRoot(newTestFactory(t, nil).Factory))
	if checked < 50 {
		t.Errorf("only %d names in the help texts: the walk missed commands", checked)
	}
}

// TestEnvNamesSpelledOnce: code reads and names a variable through its
// api.EnvVar, never a string literal of its own, so that each name is
// spelled once (env.go, or package api); prose in help texts is checked by
// TestHelpNamesKnownEnv.
func TestEnvNamesSpelledOnce(t *testing.T) {
	t.Parallel()
	literal := regexp.MustCompile(`"(?:OUTPOST|DEVIN)_[A-Z0-9_]+"`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if file == "env.go" || strings.HasSuffix(file, "_test.go") {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literal.FindAllString(string(b), -1) {
			t.Errorf("%s spells %s: use its api.EnvVar from env.go or package api", file, m)
		}
	}
}
