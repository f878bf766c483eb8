package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goldenHelp compares the --help of the command args name with the file
// testdata/name: its flags, their type names, defaults and help, and the
// variables they name.
func goldenHelp(t *testing.T, name string, args ...string) {
	t.Helper()
	tf := newTestFactory(t, nil)
	if code := tf.run(t, append(args, "--help")...); code != 0 {
		t.Fatalf("%s --help: exit %d, %s", strings.Join(args, " "), code, tf.errOut)
	}
	goldenCompare(t, name, tf.out.String())
}

// argSet is a command line of a settings golden test; $DIR in an argument
// stands for the test's directory (settingsDir).
type argSet struct {
	name string
	args []string
}

// settingsDir is a directory holding the config file config, named
// file, and the directories a, b, d, rw, git and tools that sandbox binds
// name; $DIR in config stands for the directory.
func settingsDir(t *testing.T, file, config string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strings.ReplaceAll(config, "$DIR", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "b", "d", "rw", "git", "tools"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goldenSettings runs a command up to its run, with parse, under each
// environment of envs with each argument set, and compares what it
// resolved (lines of its options) or the error it refused with, and what
// it wrote to stderr, with the file testdata/name. The file lists the
// options of the command line defaults in full, then each case as what
// differs from them. The temporary directories, which differ from run to
// run, are written $HOME, $CONFIG and $DIR, and the test's working
// directory $WD.
func goldenSettings[O any](t *testing.T, name, dir string, envs []map[string]string, sets []argSet, defaults []string,
	parse func(t *testing.T, env map[string]string, args ...string) (*O, *testFactory, error), lines func(*O) []string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	run := func(env map[string]string, args []string) (string, string, error) {
		args = slices.Clone(args)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "$DIR", dir)
		}
		o, tf, err := parse(t, env, args...)
		norm := strings.NewReplacer(tf.home, "$HOME", tf.configDir, "$CONFIG", dir, "$DIR", wd, "$WD").Replace
		switch {
		case err != nil:
			return "", norm(tf.errOut.String()), err
		case o == nil:
			return "the run was not reached, and no error", "", nil
		}
		return norm(strings.Join(lines(o), "\n")), norm(tf.errOut.String()), nil
	}
	def, _, err := run(nil, defaults)
	if err != nil {
		t.Fatal(err)
	}
	defLines := strings.Split(def, "\n")
	var b strings.Builder
	fmt.Fprintf(&b, "## defaults (%s)\n%s\n", strings.Join(defaults, " "), def)
	for i, env := range envs {
		for _, set := range sets {
			fmt.Fprintf(&b, "## env %d %s, args %s\n", i, envString(env), set.name)
			got, stderr, err := run(env, set.args)
			if err != nil {
				fmt.Fprintf(&b, "error (usage %v): %v\n", isUsage(err), err)
			}
			for _, l := range strings.Split(got, "\n") {
				if l != "" && !slices.Contains(defLines, l) {
					b.WriteString(l + "\n")
				}
			}
			for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if l != "" {
					b.WriteString("stderr: " + l + "\n")
				}
			}
		}
	}
	goldenCompare(t, name, b.String())
}
