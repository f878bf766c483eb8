package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
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

// tokenRecipe is a shell line of the docs that makes a token and takes a
// field of its JSON with jq.
var tokenRecipe = regexp.MustCompile(`outpost (tokens create [^"|)]*?) -o json \| jq -r \.([A-Za-z_]+)`)

// TestDocsTokenRecipes runs each `outpost tokens create ... -o json | jq -r
// .FIELD` of the docs as written against a real server: FIELD must be the
// field that holds the new token's secret, which the server then accepts
// (a wrong field gives jq's `null`, which a worker install would take for
// a token).
func TestDocsTokenRecipes(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	seen := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tokenRecipe.FindAllStringSubmatch(string(b), -1) {
			seen++
			args := strings.Fields(m[1])
			if i := slices.Index(args, "--outpost"); i >= 0 && i+1 < len(args) {
				if _, err := ts.c.Outposts.Get(t.Context(), args[i+1]); err != nil {
					ts.outpost(t, args[i+1])
				}
			}
			tf := newTestFactory(t, map[string]string{"OUTPOST_SERVER": ts.url, "OUTPOST_TOKEN": ts.admin})
			if code := tf.run(t, append(args, "-o", "json")...); code != 0 {
				t.Errorf("%s: `outpost %s -o json`: exit %d: %s", file, m[1], code, tf.errOut)
				continue
			}
			var out map[string]any
			if err := json.Unmarshal(tf.out.Bytes(), &out); err != nil {
				t.Errorf("%s: `outpost %s -o json` is not JSON: %v", file, m[1], err)
				continue
			}
			secret, _ := out[m[2]].(string)
			if secret == "" {
				t.Errorf("%s: `jq -r .%s` of `outpost %s -o json` gives null: the token is in another field (%v)", file, m[2], m[1], slices.Sorted(maps.Keys(out)))
				continue
			}
			c, err := client.New(ts.url, secret)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Tokens.WhoAmI(t.Context()); err != nil {
				t.Errorf("%s: the token of `outpost %s` is refused: %v", file, m[1], err)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no token recipe found in the docs; the pattern is out of date")
	}
}
