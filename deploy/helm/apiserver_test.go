//go:build !windows

package helm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// startAPIServer starts a real kube-apiserver and etcd (envtest, from
// KUBEBUILDER_ASSETS: bash scripts/envtest-assets.sh) and returns a client
// of it with admin rights that refuses unknown fields. Without the assets the test is skipped, or
// fails when CI is set.
func startAPIServer(t *testing.T) client.Client {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)")
	}
	env := &envtest.Environment{ControlPlaneStartTimeout: time.Minute}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// An unknown or duplicate field is an error, not a warning: the API
	// server judges the render as strictly as the decoder does.
	return client.WithFieldValidation(c, client.FieldValidation(metav1.FieldValidationStrict))
}

// apply creates every manifest in the API server, as `helm install` would
// (CRDs first, waited for until established; namespaces made when
// missing), so the server's own validation — built-in kinds and the CRD's
// schema — judges the render. Kinds named in skip are left out.
func apply(ctx context.Context, t *testing.T, c client.Client, ms []Manifest, skip ...string) {
	t.Helper()
	for _, m := range ms {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(m.YAML), &u.Object); err != nil {
			t.Fatalf("%s: %v", m.Source, err)
		}
		if slices.Contains(skip, u.GetKind()) {
			continue
		}
		if ns := u.GetNamespace(); ns != "" {
			ensureNamespace(ctx, t, c, ns)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("create %s %s/%s from %s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), m.Source, err)
		}
		if u.GetKind() == "CustomResourceDefinition" {
			waitEstablished(ctx, t, c, u.GetName())
		}
	}
}

// ensureNamespace creates the namespace unless it exists.
func ensureNamespace(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// waitEstablished waits until the CRD serves its resource.
func waitEstablished(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}

// access is one question to the authorizer: may the subject do verb on
// resource (in namespace; "" is every namespace, or a cluster-scoped
// resource), by name when given.
type access struct {
	verb, group, resource, subresource, namespace, name string
	allowed                                             bool
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace == "" {
		return s + " cluster-wide"
	}
	return s + " in " + a.namespace
}

// checkAccess asks the API server, by SubjectAccessReview, each question
// for the ServiceAccount ns/name (with the groups a ServiceAccount token
// carries) and fails on every answer that is not the one expected.
func checkAccess(ctx context.Context, t *testing.T, c client.Client, ns, name string, questions []access) {
	t.Helper()
	for _, q := range questions {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   fmt.Sprintf("system:serviceaccount:%s:%s", ns, name),
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: q.verb, Group: q.group, Resource: q.resource, Subresource: q.subresource,
				Namespace: q.namespace, Name: q.name,
			},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview %s: %v", q, err)
		}
		if sar.Status.Allowed != q.allowed {
			t.Errorf("%s: allowed %v, want %v (%s)", q, sar.Status.Allowed, q.allowed, sar.Status.Reason)
		}
	}
}

// TestChartsOnAPIServer applies the rendered charts to a real
// kube-apiserver and asks its RBAC authorizer what the operator's
// ServiceAccount may do.
func TestChartsOnAPIServer(t *testing.T) {
	c := startAPIServer(t)
	ctx := t.Context()

	t.Run("namespaced RBAC", func(t *testing.T) {
		ms, err := Render(ctx, Operator, Options{ReleaseName: "outpost-operator", Namespace: "outpost-system", Values: values(t, `
operator: {watchNamespaces: [team-a, team-b]}
`)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"team-a", "team-b", "elsewhere"} {
			ensureNamespace(ctx, t, c, ns)
		}
		apply(ctx, t, c, ms)
		var q []access
		for _, ns := range []string{"team-a", "team-b"} {
			for _, verb := range []string{"get", "create", "update", "patch", "delete"} {
				q = append(q, access{verb: verb, resource: "secrets", namespace: ns, allowed: true},
					access{verb: verb, group: "networking.k8s.io", resource: "networkpolicies", namespace: ns, allowed: true})
			}
			for _, res := range []string{"pods", "persistentvolumeclaims"} {
				for _, verb := range []string{"get", "list", "watch", "create", "delete"} {
					q = append(q, access{verb: verb, resource: res, namespace: ns, allowed: true})
				}
			}
			q = append(q,
				access{verb: "list", resource: "secrets", namespace: ns},
				access{verb: "watch", resource: "secrets", namespace: ns},
				access{verb: "list", group: "networking.k8s.io", resource: "networkpolicies", namespace: ns, allowed: true},
				access{verb: "watch", group: "networking.k8s.io", resource: "networkpolicies", namespace: ns},
				access{verb: "watch", group: "outpost.dev", resource: "outpostpools", namespace: ns, allowed: true},
				access{verb: "patch", group: "outpost.dev", resource: "outpostpools", subresource: "status", namespace: ns, allowed: true},
				access{verb: "update", group: "outpost.dev", resource: "outpostpools", subresource: "finalizers", namespace: ns, allowed: true},
				access{verb: "delete", group: "outpost.dev", resource: "outpostpools", namespace: ns},
				access{verb: "create", resource: "events", namespace: ns, allowed: true},
				access{verb: "create", group: "events.k8s.io", resource: "events", namespace: ns, allowed: true},
				access{verb: "create", resource: "pods", subresource: "exec", namespace: ns},
				access{verb: "get", resource: "configmaps", namespace: ns},
				access{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns},
				access{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: ns, name: "default"},
			)
		}
		q = append(q,
			// Nothing outside the watched namespaces, the release's own included.
			access{verb: "get", resource: "secrets", namespace: "elsewhere"},
			access{verb: "create", resource: "secrets", namespace: "elsewhere"},
			access{verb: "get", resource: "secrets", namespace: "outpost-system"},
			access{verb: "create", resource: "pods", namespace: "elsewhere"},
			access{verb: "list", group: "outpost.dev", resource: "outpostpools", namespace: "elsewhere"},
			// Nothing cluster-wide.
			access{verb: "get", resource: "secrets"},
			access{verb: "list", resource: "secrets"},
			access{verb: "list", resource: "pods"},
			access{verb: "list", group: "outpost.dev", resource: "outpostpools"},
			access{verb: "get", resource: "nodes"},
			access{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: "team-a"},
			// Its own state in the release's namespace, by name.
			access{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "outpost-system", allowed: true},
			access{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "outpost-system", name: "outpost-operator", allowed: true},
			access{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "outpost-system", name: "kube-scheduler"},
			access{verb: "create", resource: "configmaps", namespace: "outpost-system", allowed: true},
			access{verb: "get", resource: "configmaps", namespace: "outpost-system", name: "outpost-operator-acceptor-id", allowed: true},
			access{verb: "get", resource: "configmaps", namespace: "outpost-system", name: "kube-root-ca.crt"},
			access{verb: "list", resource: "configmaps", namespace: "outpost-system"},
		)
		checkAccess(ctx, t, c, "outpost-system", "outpost-operator", q)
	})

	t.Run("cluster-wide RBAC", func(t *testing.T) {
		ms, err := Render(ctx, Operator, Options{ReleaseName: "wide", Namespace: "wide-system"})
		if err != nil {
			t.Fatal(err)
		}
		apply(ctx, t, c, ms, "CustomResourceDefinition") // installed above
		checkAccess(ctx, t, c, "wide-system", "wide-outpost-operator", []access{
			{verb: "create", resource: "secrets", namespace: "elsewhere", allowed: true},
			{verb: "delete", resource: "secrets", namespace: "team-a", allowed: true},
			{verb: "get", resource: "secrets", namespace: "elsewhere", allowed: true},
			{verb: "list", resource: "secrets", namespace: "elsewhere"},
			{verb: "watch", resource: "secrets"},
			{verb: "list", resource: "pods", allowed: true},
			{verb: "watch", resource: "persistentvolumeclaims", allowed: true},
			{verb: "list", group: "outpost.dev", resource: "outpostpools", allowed: true},
			{verb: "get", resource: "configmaps", namespace: "elsewhere"},
			{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "elsewhere"},
			{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "wide-system", allowed: true},
			{verb: "create", resource: "pods", subresource: "exec", namespace: "elsewhere"},
		})
	})

	// The API server's validation accepts every object of the non-default
	// renders: the default pool against the CRD's schema, the workloads,
	// Ingress and claims against the built-in kinds.
	t.Run("apply", func(t *testing.T) {
		ms, err := Render(ctx, Operator, Options{ReleaseName: "pool", Namespace: "agents", Values: values(t, `
operator: {watchNamespaces: [agents], defaultApiUrl: "https://outpost.example.com", caBundle: {configMap: ca}}
metrics: {serviceMonitor: {enabled: true}}
defaultPool:
  enabled: true
  outpost: linux
  token: {value: opt_x}
  maxConcurrentSessions: 4
  resume: {policy: FilesystemSnapshot, volumeSize: 5Gi, snapshotTtlSeconds: 3600}
  network: {enforcement: NetworkPolicy, controlPlane: {to: [{namespaceSelector: {matchLabels: {team: outpost}}}]}}
  worker: {template: {spec: {nodeSelector: {a: b}, containers: [{name: outpost-remote, resources: {limits: {memory: 2Gi}}}]}}}
`)})
		if err != nil {
			t.Fatal(err)
		}
		// No Prometheus operator here; the CRD was installed above.
		apply(ctx, t, c, ms, "ServiceMonitor", "CustomResourceDefinition")
		for i, y := range []string{
			``,
			`ingress: {enabled: true, className: nginx, hosts: [{host: outpost.example.com}], tls: [{secretName: t, hosts: [outpost.example.com]}]}`,
			`{kind: StatefulSet, database: {url: "postgres://u:p@db/o"}, server: {tls: {secretName: cert}, secretKey: {existingSecret: k}}}`,
		} {
			ms, err := Render(ctx, Server, Options{ReleaseName: fmt.Sprintf("s%d", i), Namespace: "outpost", Values: values(t, y)})
			if err != nil {
				t.Fatal(err)
			}
			apply(ctx, t, c, ms)
		}
		// The check can fail: a misspelt field of a pool is refused.
		bad := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(`
apiVersion: outpost.dev/v1alpha1
kind: OutpostPool
metadata: {name: typo, namespace: agents}
spec: {outpost: x, tokenSecretRef: {name: t}, maxConcurrentSesions: 3}
`), &bad.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, bad); err == nil {
			t.Error("the API server took a pool with an unknown field")
		}
	})
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
