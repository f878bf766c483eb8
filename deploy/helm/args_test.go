package helm

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/pflag"
)

// operatorFlags are the flags of `outpost operator` as the design fixes
// them (docs/kubernetes.md lists them too); the chart may pass no other.
func operatorFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	for _, name := range []string{"kubeconfig", "metrics-listen", "health-listen", "leader-election-id",
		"operator-namespace", "default-api-url", "acceptor-id", "worker-image", "ca-file"} {
		fs.String(name, "", "")
	}
	fs.StringArray("namespace", nil, "")
	fs.StringArray("allowed-api-url", nil, "")
	fs.Bool("leader-elect", false, "")
	return fs
}

// operatorArgCases are values whose renders between them pass every flag
// the chart can pass.
var operatorArgCases = []string{
	``,
	`operator: {leaderElect: false}`,
	`
image: {tag: v9}
operator:
  watchNamespaces: [team-a, team-b]
  defaultApiUrl: "https://outpost.example.com"
  allowedApiUrls: ["https://outpost.example.com", "https://*.corp.example.com"]
  acceptorId: k8s-prod
  caBundle: {configMap: ca}
  workerImage: {repository: registry.example.com/worker, tag: "1.2"}
metrics: {port: 9090}
health: {port: 9091}
`,
}

// TestOperatorArgsAreTheDesignsFlags: the operator's arguments are
// `operator` and flags from the design's list, each with a value of the
// right shape.
func TestOperatorArgsAreTheDesignsFlags(t *testing.T) {
	t.Parallel()
	for _, y := range operatorArgCases {
		_, c := operatorContainer(t, render(t, Operator, Options{Values: values(t, y)}), "outpost-operator")
		if len(c.Args) == 0 || c.Args[0] != "operator" {
			t.Fatalf("args %q do not start with the operator command", c.Args)
		}
		fs := operatorFlags()
		if err := fs.Parse(c.Args[1:]); err != nil {
			t.Fatalf("args %q: %v", c.Args, err)
		}
		if fs.NArg() != 0 {
			t.Errorf("args %q: positional arguments %q", c.Args, fs.Args())
		}
		for _, name := range []string{"metrics-listen", "health-listen"} {
			if v, _ := fs.GetString(name); !regexp.MustCompile(`^:[0-9]+$`).MatchString(v) {
				t.Errorf("--%s=%q, want :PORT", name, v)
			}
		}
		if v, _ := fs.GetString("worker-image"); !strings.Contains(v, ":") {
			t.Errorf("--worker-image=%q has no tag", v)
		}
	}
}

// outpostBinary builds cmd/outpost, and cmd/outpost-operator next to it
// (which `outpost operator` runs), once for the package's tests.
var outpostBinary = sync.OnceValues(func() (string, error) {
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(buildDir, "outpost")
	cmd := exec.Command("go", "build", "-o", buildDir+string(filepath.Separator), "./cmd/outpost", "./cmd/outpost-operator")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, out: out}
	}
	return bin, nil
})

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build ./cmd/outpost ./cmd/outpost-operator: " + e.err.Error() + "\n" + string(e.out)
}

// runOutpost runs the built outpost with args and returns its output and
// error.
func runOutpost(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds cmd/outpost")
	}
	bin, err := outpostBinary()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	err = cmd.Run()
	return out.String(), err
}

// TestOperatorArgsParseWithTheRealCommand: `outpost operator` accepts the
// rendered arguments (cobra parses every flag before it looks at --help,
// so an unknown flag or a bad value fails).
func TestOperatorArgsParseWithTheRealCommand(t *testing.T) {
	t.Parallel()
	if out, err := runOutpost(t, "operator", "--help"); err != nil || !strings.Contains(out, "--leader-elect") {
		t.Fatalf("`outpost operator --help` (%v):\n%s", err, out)
	}
	for _, y := range operatorArgCases {
		_, c := operatorContainer(t, render(t, Operator, Options{Values: values(t, y)}), "outpost-operator")
		if out, err := runOutpost(t, append(c.Args, "--help")...); err != nil {
			t.Errorf("outpost %q: %v\n%s", c.Args, err, out)
		}
	}
}

// TestServerArgsParseWithTheRealCommand: `outpost server` accepts the
// rendered arguments, and every OUTPOST_ variable the chart sets is one
// the server reads (its help lists them).
func TestServerArgsParseWithTheRealCommand(t *testing.T) {
	t.Parallel()
	help, err := runOutpost(t, "server", "--help")
	if err != nil {
		t.Fatalf("outpost server --help: %v\n%s", err, help)
	}
	for _, y := range []string{
		``,
		`{database: {url: "postgres://db/o"}, server: {secretKey: {existingSecret: k}, adminToken: {existingSecret: a}, logLevel: debug}}`,
		`{kind: StatefulSet, server: {tls: {secretName: cert}, extraArgs: [--claim-ttl=120s]}}`,
	} {
		_, c := serverPod(t, render(t, Server, Options{Values: values(t, y)}))
		if out, err := runOutpost(t, append(c.Args, "--help")...); err != nil {
			t.Errorf("outpost %q: %v\n%s", c.Args, err, out)
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "OUTPOST_") && !strings.Contains(help, e.Name) {
				t.Errorf("the chart sets %s, which `outpost server --help` does not name", e.Name)
			}
		}
	}
	// Several replicas: the flags that name each replica and say where the
	// others reach it, checked only when the server under test has them.
	if strings.Contains(help, "--replica-url") {
		_, c := serverPod(t, render(t, Server, Options{Values: values(t,
			`{replicaCount: 3, database: {url: "postgres://db/o"}, persistence: {enabled: false}, server: {secretKey: {existingSecret: k}}}`)}))
		if out, err := runOutpost(t, append(c.Args, "--help")...); err != nil {
			t.Errorf("outpost %q: %v\n%s", c.Args, err, out)
		}
	} else {
		t.Log("outpost server has no --replica-url yet: the replicas' arguments are not checked")
	}
	// The check can fail: a flag the server does not have is refused.
	if out, err := runOutpost(t, "server", "--no-such-flag", "--help"); err == nil {
		t.Errorf("outpost server --no-such-flag --help succeeded:\n%s", out)
	}
}
