// Package helm holds Outpost's Helm charts, outpost-operator and
// outpost-server (docs/kubernetes.md), embedded so that tests and programs
// render them in-process with the Helm SDK, with no helm binary, exactly as
// the repository ships them.
package helm

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
)

// Charts holds the charts' directories, outpost-operator/ and
// outpost-server/, with their templates (the "all:" prefix keeps
// _helpers.tpl and .helmignore, which go:embed would drop).
//
//go:embed all:outpost-operator all:outpost-server
var Charts embed.FS

// The charts' names, which are also their directories in Charts.
const (
	// Operator is the chart of `outpost operator`: the OutpostPool CRD,
	// RBAC, the operator's Deployment, metrics and an optional default pool.
	Operator = "outpost-operator"
	// Server is the chart of `outpost server`: its Deployment or
	// StatefulSet, the data dir's volume, Service and Ingress.
	Server = "outpost-server"
)

// KubeVersion is the Kubernetes version a render assumes when Options
// gives none: the version the charts are tested against (envtest's
// kube-apiserver, k8s.io/api's minor).
const KubeVersion = "v1.37.0"

// Load reads the chart name ([Operator] or [Server]) from [Charts].
func Load(name string) (*chart.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(Charts, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := Charts.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: strings.TrimPrefix(p, name+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", name, err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", name, err)
	}
	return c, nil
}

// Options are a render's release: what `helm install NAME CHART -n
// NAMESPACE -f values.yaml` is given.
type Options struct {
	// ReleaseName is the release's name; "" means the chart's name.
	ReleaseName string
	// Namespace is the release's namespace; "" means "default".
	Namespace string
	// Values are merged over the chart's values.yaml, as -f and --set are;
	// nil means the defaults.
	Values map[string]any
	// KubeVersion is the cluster's version (.Capabilities.KubeVersion);
	// "" means [KubeVersion].
	KubeVersion string
	// APIVersions are API group versions the cluster serves besides the
	// built-in ones (.Capabilities.APIVersions), e.g.
	// "monitoring.coreos.com/v1".
	APIVersions []string
}

// Manifest is one rendered Kubernetes object.
type Manifest struct {
	// Source is the chart file it comes from, e.g.
	// "outpost-operator/templates/rbac.yaml" or
	// "outpost-operator/crds/outpost.dev_outpostpools.yaml".
	Source string
	// YAML is the object, one YAML document.
	YAML string
}

// Render renders the chart name as `helm install --dry-run` would: the
// values are checked against the chart's values.schema.json, a template's
// fail or required stops the render with its message, and the result is
// the chart's CRDs (crds/, as they are) followed by its templates' objects,
// by file name and then in file order. NOTES.txt and empty documents are
// left out.
func Render(ctx context.Context, name string, opts Options) ([]Manifest, error) {
	c, err := Load(name)
	if err != nil {
		return nil, err
	}
	release := opts.ReleaseName
	if release == "" {
		release = name
	}
	namespace := opts.Namespace
	if namespace == "" {
		namespace = "default"
	}
	kv := opts.KubeVersion
	if kv == "" {
		kv = KubeVersion
	}
	version, err := common.ParseKubeVersion(kv)
	if err != nil {
		return nil, fmt.Errorf("render %s: kube version %q: %w", name, kv, err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *version
	caps.APIVersions = append(slices.Clone(caps.APIVersions), opts.APIVersions...)
	values := opts.Values
	if values == nil {
		values = map[string]any{}
	}
	top, err := util.ToRenderValuesWithSchemaValidation(c, values, common.ReleaseOptions{
		Name:      release,
		Namespace: namespace,
		Revision:  1,
		IsInstall: true,
	}, caps, false)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	files, err := engine.Engine{}.RenderWithContext(ctx, c, top)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}

	var out []Manifest
	for _, crd := range c.CRDObjects() {
		out = append(out, Manifest{Source: path.Join(name, crd.Name), YAML: string(crd.File.Data)})
	}
	sources := make([]string, 0, len(files))
	for source := range files {
		sources = append(sources, source)
	}
	slices.Sort(sources)
	for _, source := range sources {
		if strings.HasSuffix(source, "NOTES.txt") {
			continue
		}
		docs := releaseutil.SplitManifests(files[source])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			if len(a) != len(b) {
				return len(a) - len(b)
			}
			return strings.Compare(a, b)
		})
		for _, k := range keys {
			if doc := docs[k]; !onlyComments(doc) {
				out = append(out, Manifest{Source: source, YAML: doc})
			}
		}
	}
	return out, nil
}

// onlyComments reports whether a YAML document holds no object: blank
// lines and comments only (a template whose condition was false).
func onlyComments(doc string) bool {
	for line := range strings.SplitSeq(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}
