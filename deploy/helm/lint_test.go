package helm

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// lintCases are values each chart is linted with: the defaults and the
// non-default shapes the render tests cover.
var lintCases = map[string][]string{
	Operator: {
		``,
		`operator: {watchNamespaces: [team-a, team-b]}`,
		`
operator: {watchNamespaces: [default], defaultApiUrl: "https://outpost.example.com"}
metrics: {serviceMonitor: {enabled: true}}
defaultPool:
  enabled: true
  outpost: linux
  token: {value: opt_x}
  resume: {policy: FilesystemSnapshot, volumeSize: 5Gi}
  worker: {template: {spec: {nodeSelector: {a: b}}}}
`,
	},
	Server: {
		``,
		`ingress: {enabled: true, className: nginx, hosts: [{host: outpost.example.com}], tls: [{secretName: t, hosts: [outpost.example.com]}]}`,
		`{database: {url: "postgres://u:p@db/o"}, persistence: {enabled: false}, kind: StatefulSet}`,
		`{kind: StatefulSet, server: {tls: {secretName: cert}}}`,
	},
}

// TestLint: the Helm SDK's linter (what `helm lint` runs: Chart.yaml,
// values against the schema, the templates rendered and parsed as
// Kubernetes objects, deprecated APIs for the kube version, crds/) finds
// nothing above INFO in either chart, with each case's values.
func TestLint(t *testing.T) {
	t.Parallel()
	kv, err := common.ParseKubeVersion(KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for chart, cases := range lintCases {
		for _, y := range cases {
			linter := lint.RunAll(chart, values(t, y), "default", lint.WithKubeVersion(kv))
			for _, m := range linter.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("%s with %q: %s", chart, y, m)
				}
			}
		}
	}
}

// TestLintCatchesABrokenTemplate: the linter the test above relies on does
// fail a chart: a copy of the operator chart with a template that does not
// render to YAML has an ERROR.
func TestLintCatchesABrokenTemplate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), Operator)
	sub, err := fs.Sub(Charts, Operator)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatal(err)
	}
	broken := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata: [unclosed\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "broken.yaml"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	linter := lint.RunAll(dir, nil, "default")
	for _, m := range linter.Messages {
		if m.Severity == support.ErrorSev {
			return
		}
	}
	t.Errorf("no ERROR for a template that is not YAML: %v", linter.Messages)
}
