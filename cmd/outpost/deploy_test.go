package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/deploy/systemd"
	"github.com/outpost-sh/outpost/internal/cliconfig"
)

// exampleKey is a settings line of a shipped example, set or commented
// out: "key: value", "# key: value  # remark".
var exampleKey = regexp.MustCompile(`^(?:# )?([a-z][a-z-]*): (.*?)(?:\s+#.*)?$`)

// TestShippedSettingsFiles: each example settings file of deploy/systemd
// names every setting of its command, and each of its keys, commented out
// or not, is one the command accepts with the value shown.
func TestShippedSettingsFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		cmd  []string
		// notListed are flags the example leaves out on purpose.
		notListed []string
	}{
		{"server.yaml", []string{"server"}, []string{"ca-file", "server", "token", "token-file"}}, // the global flags are the client's
		{"worker.yaml", []string{"worker", "start"}, []string{"session", "once", "poll-interval-secs", "pool", "token"}},
		{"orchestrate.yaml", []string{"orchestrate"}, nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			raw, err := systemd.Files.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			keys := map[string]bool{}
			for _, line := range strings.Split(string(raw), "\n") {
				if m := exampleKey.FindStringSubmatch(line); m != nil {
					keys[m[1]] = true
					all.WriteString(m[1] + ": " + m[2] + "\n")
				}
			}
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, []byte(all.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			root := NewCmdRoot(newTestFactory(t, nil).Factory)
			cmd, _, err := root.Find(tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags(nil); err != nil {
				t.Fatal(err)
			}
			if err := cliconfig.Apply(cmd.Flags(), path); err != nil {
				t.Errorf("the keys of %s, uncommented: %v", tc.file, err)
			}
			if tc.file == "orchestrate.yaml" {
				return // an example of a few settings, not a reference
			}
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				skip := append([]string{"help", "config", "output"}, tc.notListed...)
				if !keys[f.Name] && !slices.Contains(skip, f.Name) {
					t.Errorf("%s does not show the setting %s", tc.file, f.Name)
				}
			})
		})
	}
}

// TestShippedEnvFiles: the example env files list every variable their
// command reads, and nothing else.
func TestShippedEnvFiles(t *testing.T) {
	t.Parallel()
	worker := []string{envCAFile.Name, envLogLevel.Name, envLogFormat.Name}
	for _, v := range api.WorkerEnv {
		// A connect token serves one claimed session: no service's.
		if v.Name != "" && v != api.EnvSessionToken {
			worker = append(worker, v.Name)
		}
	}
	var server []string
	for _, v := range serverEnv {
		server = append(server, v.Name)
	}
	name := regexp.MustCompile(`^(?:# )?(OUTPOST_[A-Z_]+)=`)
	for file, want := range map[string][]string{"worker.env": worker, "server.env": server} {
		raw, err := systemd.Files.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(string(raw), "\n") {
			if m := name.FindStringSubmatch(line); m != nil {
				got = append(got, m[1])
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists %q, want %q", file, got, want)
		}
	}
}
