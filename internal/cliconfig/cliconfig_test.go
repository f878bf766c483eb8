package cliconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testFlags is a flag set with one flag of each kind commands use.
type testFlags struct {
	fl       *pflag.FlagSet
	listen   string
	ttl      time.Duration
	limit    int
	cpus     float64
	required bool
	binds    []string
}

func newTestFlags(t *testing.T, args ...string) *testFlags {
	t.Helper()
	tf := &testFlags{fl: pflag.NewFlagSet("test", pflag.ContinueOnError)}
	tf.fl.StringVar(&tf.listen, "listen", "127.0.0.1:7420", "")
	tf.fl.DurationVar(&tf.ttl, "claim-ttl", 300*time.Second, "")
	tf.fl.IntVar(&tf.limit, "tool-result-limit", 16000, "")
	tf.fl.Float64Var(&tf.cpus, "docker-cpus", 0, "")
	tf.fl.BoolVar(&tf.required, "metrics-token-required", false, "")
	tf.fl.StringArrayVar(&tf.binds, "bwrap-bind", nil, "")
	tf.fl.String("config", "", "")
	if err := tf.fl.Parse(args); err != nil {
		t.Fatal(err)
	}
	return tf
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outpost.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestApplyValues: every kind of flag takes its file value, a list fills
// a repeatable flag, and the flags stay unchanged in pflag's sense.
func TestApplyValues(t *testing.T) {
	t.Parallel()
	tf := newTestFlags(t)
	path := writeFile(t, `# a comment
listen: 0.0.0.0:7420
claim-ttl: 90s
tool-result-limit: 2000
docker-cpus: 1.5
metrics-token-required: true
bwrap-bind:
  - /srv/a
  - /srv/b:/b
`)
	if err := Apply(tf.fl, path); err != nil {
		t.Fatal(err)
	}
	if tf.listen != "0.0.0.0:7420" || tf.ttl != 90*time.Second || tf.limit != 2000 || tf.cpus != 1.5 || !tf.required ||
		!slices.Equal(tf.binds, []string{"/srv/a", "/srv/b:/b"}) {
		t.Errorf("values: %+v", tf)
	}
	for _, name := range []string{"listen", "claim-ttl", "bwrap-bind"} {
		if tf.fl.Changed(name) || !FromFile(tf.fl, name) {
			t.Errorf("%s: changed %v, from file %v; want false, true", name, tf.fl.Changed(name), FromFile(tf.fl, name))
		}
	}
	if FromFile(tf.fl, "config") {
		t.Error("config is not from the file")
	}
}

// TestApplyFlagWins: a flag given on the command line keeps its value,
// lists included; the others take the file's.
func TestApplyFlagWins(t *testing.T) {
	t.Parallel()
	tf := newTestFlags(t, "--listen", "127.0.0.1:1", "--bwrap-bind", "/flag")
	path := writeFile(t, "listen: 0.0.0.0:7420\nclaim-ttl: 1m\nbwrap-bind: [/file]\n")
	if err := Apply(tf.fl, path); err != nil {
		t.Fatal(err)
	}
	if tf.listen != "127.0.0.1:1" || !slices.Equal(tf.binds, []string{"/flag"}) || tf.ttl != time.Minute {
		t.Errorf("values: %+v", tf)
	}
	if FromFile(tf.fl, "listen") {
		t.Error("listen came from the command line")
	}
}

// TestOverridden: a file value replaced after Apply (by an environment
// fallback) is reported; one kept is not, whatever its spelling.
func TestOverridden(t *testing.T) {
	t.Parallel()
	tf := newTestFlags(t)
	if err := Apply(tf.fl, writeFile(t, "listen: 0.0.0.0:7420\nclaim-ttl: 90s\n")); err != nil {
		t.Fatal(err)
	}
	if got := Overridden(tf.fl); len(got) != 0 {
		t.Errorf("nothing overridden yet: %q", got)
	}
	tf.listen = "127.0.0.1:9"
	if got := Overridden(tf.fl); !slices.Equal(got, []string{"listen"}) {
		t.Errorf("overridden %q, want [listen]", got)
	}
}

// TestApplySingleItem: a repeatable flag also takes one value.
func TestApplySingleItem(t *testing.T) {
	t.Parallel()
	tf := newTestFlags(t)
	if err := Apply(tf.fl, writeFile(t, "bwrap-bind: /srv/one\n")); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tf.binds, []string{"/srv/one"}) {
		t.Errorf("binds %q", tf.binds)
	}
}

// TestApplyEmpty: an empty file, or one of comments only, changes nothing.
func TestApplyEmpty(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "\n", "# nothing yet\n"} {
		tf := newTestFlags(t)
		if err := Apply(tf.fl, writeFile(t, body)); err != nil || tf.listen != "127.0.0.1:7420" {
			t.Errorf("%q: %v, listen %q", body, err, tf.listen)
		}
	}
}

// TestApplyErrors: each mistake is an error naming the file and the key.
func TestApplyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the error
	}{
		{"typo", "claim-tll: 300s\n", []string{`unknown key "claim-tll"`, `did you mean "claim-ttl"?`}},
		{"underscore", "claim_ttl: 300s\n", []string{`unknown key "claim_ttl"`, `did you mean "claim-ttl"?`}},
		{"far from any flag", "colour: blue\n", []string{`unknown key "colour"`, "see --help"}},
		{"duration as a number", "claim-ttl: 300\n", []string{"claim-ttl", "is a number", "300s"}},
		{"bad duration", "claim-ttl: soon\n", []string{"claim-ttl", `"soon" is not a duration`}},
		{"int as text", "tool-result-limit: many\n", []string{"tool-result-limit", "an integer"}},
		{"bool as text", "metrics-token-required: maybe\n", []string{"metrics-token-required", "true or false"}},
		{"bool for a string", "listen: yes\n", []string{"listen", "is a boolean", "quote it"}},
		{"list for a scalar", "listen: [a, b]\n", []string{"listen", "a list", "repeatable"}},
		{"mapping for a scalar", "listen: {host: a}\n", []string{"listen", "a mapping"}},
		{"list item of the wrong type", "bwrap-bind: [/a, [x]]\n", []string{"bwrap-bind, item 2", "a list"}},
		{"no value", "listen:\n", []string{"listen has no value"}},
		{"config in config", "config: other.yaml\n", []string{`key "config"`}},
		{"not a mapping", "- listen\n", []string{"want a mapping"}},
		{"not YAML", "listen: [\n", []string{"config file"}},
		{"duplicate key", "listen: a\nlisten: b\n", []string{"listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tf := newTestFlags(t)
			path := writeFile(t, tc.body)
			err := Apply(tf.fl, path)
			if err == nil {
				t.Fatalf("%q: no error", tc.body)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestApplyMissingFile: a file that is not there is an error naming it.
func TestApplyMissingFile(t *testing.T) {
	t.Parallel()
	tf := newTestFlags(t)
	path := filepath.Join(t.TempDir(), "nope.yaml")
	err := Apply(tf.fl, path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"claim-tll", "claim-ttl", 1}, {"listen", "lsiten", 2}, {"kitten", "sitting", 3}} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
