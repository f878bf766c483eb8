package helm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// scheme knows every kind the charts render except the ServiceMonitor,
// which has no type in k8s.io/api (serviceMonitor below).
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML into the scheme's typed objects, failing on a field
// the type does not have and on a field given twice.
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// operator chart writes, decoded strictly like the others (the
// prometheus-operator module would bump k8s.io/utils and kube-openapi).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// object is one rendered manifest decoded.
type object struct {
	Manifest
	GVK schema.GroupVersionKind
	Obj runtime.Object
	// Name and Namespace are the object's.
	Name, Namespace string
}

// decode decodes every manifest strictly into its typed object.
func decode(ms []Manifest) ([]object, error) {
	var out []object
	for _, m := range ms {
		var obj runtime.Object
		var gvk schema.GroupVersionKind
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(m.YAML), &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Source, err)
		}
		if tm.APIVersion == "monitoring.coreos.com/v1" && tm.Kind == "ServiceMonitor" {
			sm := &serviceMonitor{}
			if err := yaml.UnmarshalStrict([]byte(m.YAML), sm); err != nil {
				return nil, fmt.Errorf("%s: ServiceMonitor: %w", m.Source, err)
			}
			obj, gvk = &monitorObject{sm}, tm.GroupVersionKind()
		} else {
			o, g, err := strict.Decode([]byte(m.YAML), nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", m.Source, err, m.YAML)
			}
			obj, gvk = o, *g
		}
		meta, err := metaOf(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Source, err)
		}
		out = append(out, object{Manifest: m, GVK: gvk, Obj: obj, Name: meta.GetName(), Namespace: meta.GetNamespace()})
	}
	return out, nil
}

// monitorObject makes a serviceMonitor a runtime.Object.
type monitorObject struct{ *serviceMonitor }

func (u *monitorObject) DeepCopyObject() runtime.Object {
	c := *u.serviceMonitor
	return &monitorObject{&c}
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	if u, ok := obj.(*monitorObject); ok {
		return &u.ObjectMeta, nil
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// rendered is a chart's render, decoded.
type rendered []object

// render renders and decodes, failing the test on an error.
func render(t *testing.T, chart string, opts Options) rendered {
	t.Helper()
	ms, err := Render(context.Background(), chart, opts)
	if err != nil {
		t.Fatalf("render %s: %v", chart, err)
	}
	objs, err := decode(ms)
	if err != nil {
		t.Fatalf("decode %s: %v", chart, err)
	}
	return objs
}

// renderErr renders and returns the error, failing the test when there is
// none.
func renderErr(t *testing.T, chart string, opts Options) string {
	t.Helper()
	_, err := Render(context.Background(), chart, opts)
	if err == nil {
		t.Fatalf("render %s with %v: no error", chart, opts.Values)
	}
	return err.Error()
}

// kinds lists "Kind namespace/name" of every object, sorted as rendered.
func (r rendered) kinds() []string {
	var out []string
	for _, o := range r {
		out = append(out, o.GVK.Kind+" "+strings.TrimPrefix(o.Namespace+"/"+o.Name, "/"))
	}
	return out
}

// one returns the object of kind and name (any namespace when ns is ""),
// failing the test unless there is exactly one.
func one[T runtime.Object](t *testing.T, r rendered, name, ns string) T {
	t.Helper()
	var found []T
	for _, o := range r {
		if v, ok := o.Obj.(T); ok && o.Name == name && (ns == "" || o.Namespace == ns) {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T %s/%s, have %d in %v", zero, ns, name, len(found), r.kinds())
	}
	return found[0]
}

// all returns every object of type T.
func all[T runtime.Object](r rendered) []T {
	var out []T
	for _, o := range r {
		if v, ok := o.Obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// values builds a values map from YAML, for readable test cases.
func values(t *testing.T, y string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatalf("values %q: %v", y, err)
	}
	return v
}

// TestStrictDecoderCatchesTypos: the decoder the chart tests rely on
// refuses a misspelt field, in a built-in kind, in a pod template inside an
// OutpostPool and in the ServiceMonitor, so a typo in a template fails.
func TestStrictDecoderCatchesTypos(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {prots: []}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: i, imagePullpolicy: Always}]\n",
		"apiVersion: outpost.dev/v1alpha1\nkind: OutpostPool\nmetadata: {name: a}\nspec:\n  outpost: x\n  tokenSecretRef: {name: t}\n  worker:\n    template:\n      spec: {nodeSelecter: {a: b}}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: a}\nspec: {endpoints: [{port: m, intervall: 30s}]}\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: a}\nmetadata: {name: b}\n",
	} {
		if _, err := decode([]Manifest{{Source: "test", YAML: doc}}); err == nil {
			t.Errorf("decoded with no error:\n%s", doc)
		}
	}
}
