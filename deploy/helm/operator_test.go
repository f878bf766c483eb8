package helm

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// generatedCRD is the CRD controller-gen makes of operator/v1alpha1 (its
// own test keeps it in step with the types).
const generatedCRD = "../crds/outpost.dev_outpostpools.yaml"

// TestOperatorCRDIsTheGenerated: the chart's crds/ holds the generated CRD
// byte for byte, and the render hands it on unchanged.
func TestOperatorCRDIsTheGenerated(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(generatedCRD)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Charts.ReadFile("outpost-operator/crds/outpost.dev_outpostpools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("outpost-operator/crds/outpost.dev_outpostpools.yaml differs from %s: cp %[2]s deploy/helm/outpost-operator/crds/", "chart", generatedCRD)
	}
	r := render(t, Operator, Options{})
	crds := all[*apiextensionsv1.CustomResourceDefinition](r)
	if len(crds) != 1 || crds[0].Name != "outpostpools.outpost.dev" {
		t.Fatalf("CRDs rendered: %v", r.kinds())
	}
	if r[0].YAML != string(want) {
		t.Error("the rendered CRD is not the generated file as it is")
	}
}

// operatorContainer returns the operator Deployment's container.
func operatorContainer(t *testing.T, r rendered, name string) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	d := one[*appsv1.Deployment](t, r, name, "")
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("operator pod has %d containers", n)
	}
	return d, d.Spec.Template.Spec.Containers[0]
}

// TestOperatorDefaults: with no values, one cluster-wide ClusterRole (no
// watched namespaces), the state Role in the release's namespace, a
// hardened Deployment running `outpost operator` with leader election, the
// metrics Service, and no pool, Secret or ServiceMonitor.
func TestOperatorDefaults(t *testing.T) {
	t.Parallel()
	r := render(t, Operator, Options{ReleaseName: "op", Namespace: "outpost-system"})
	want := []string{
		"CustomResourceDefinition outpostpools.outpost.dev",
		"Deployment outpost-system/op-outpost-operator",
		"ClusterRole op-outpost-operator",
		"ClusterRoleBinding op-outpost-operator",
		"Role outpost-system/op-outpost-operator-state",
		"RoleBinding outpost-system/op-outpost-operator-state",
		"Service outpost-system/op-outpost-operator-metrics",
		"ServiceAccount outpost-system/op-outpost-operator",
	}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %q\nwant %q", got, want)
	}
	d, c := operatorContainer(t, r, "op-outpost-operator")
	if c.Image != "ghcr.io/outpost-sh/outpost:0.1.0" {
		t.Errorf("image %q, want the appVersion tag", c.Image)
	}
	wantArgs := []string{"operator", "--leader-elect", "--leader-election-id=outpost-operator",
		"--worker-image=ghcr.io/outpost-sh/outpost-worker:0.1.0", "--metrics-listen=:8080", "--health-listen=:8081"}
	if !slices.Equal(c.Args, wantArgs) || !slices.Equal(c.Command, []string{"outpost"}) {
		t.Errorf("command %q args %q, want [outpost] %q", c.Command, c.Args, wantArgs)
	}
	checkHardened(t, d.Spec.Template.Spec, c)
	if len(c.Env) == 0 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE is not from the downward API: %+v", c.Env)
	}
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %+v, want GET %s on port health", probe, path)
		}
	}
	if d.Spec.Template.Spec.ServiceAccountName != "op-outpost-operator" {
		t.Errorf("serviceAccountName %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	svc := one[*corev1.Service](t, r, "op-outpost-operator-metrics", "outpost-system")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the metrics Service selects %s=%s, which the operator's pod lacks", k, v)
		}
	}
	// Cluster-wide, the ClusterRole still neither lists nor watches Secrets.
	checkSecretsNotListed(t, one[*rbacv1.ClusterRole](t, r, "op-outpost-operator", "").Rules)
}

// checkHardened: non-root 10001, no privilege escalation, no capabilities,
// a read-only root file system, the runtime's seccomp profile.
func checkHardened(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("no security context")
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 10001 ||
		psc.RunAsGroup == nil || *psc.RunAsGroup != 10001 || psc.FSGroup == nil || *psc.FSGroup != 10001 {
		t.Errorf("pod security context %+v, want non-root 10001", psc)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp %+v", psc.SeccompProfile)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v", sc)
	}
}

// checkSecretsNotListed: no rule grants list or watch on Secrets (or on
// every resource), so the operator can hold no cache of them.
func checkSecretsNotListed(t *testing.T, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, rule := range rules {
		if !slices.Contains(rule.APIGroups, "") && !slices.Contains(rule.APIGroups, "*") {
			continue
		}
		if !slices.Contains(rule.Resources, "secrets") && !slices.Contains(rule.Resources, "*") {
			continue
		}
		for _, v := range rule.Verbs {
			if v == "list" || v == "watch" || v == "*" {
				t.Errorf("a rule grants %s on secrets: %+v", v, rule)
			}
		}
	}
}

// TestOperatorWatchNamespaces: with watched namespaces the RBAC is all
// namespaced — a Role and RoleBinding in each, nothing cluster-wide — and
// the operator is told each with --namespace.
func TestOperatorWatchNamespaces(t *testing.T) {
	t.Parallel()
	r := render(t, Operator, Options{ReleaseName: "outpost-operator", Namespace: "outpost-system", Values: values(t, `
operator:
  watchNamespaces: [team-a, team-b, team-a]
`)})
	if n := len(all[*rbacv1.ClusterRole](r)) + len(all[*rbacv1.ClusterRoleBinding](r)); n != 0 {
		t.Errorf("%d cluster-wide RBAC objects with watched namespaces: %v", n, r.kinds())
	}
	for _, ns := range []string{"team-a", "team-b"} {
		role := one[*rbacv1.Role](t, r, "outpost-operator", ns)
		checkSecretsNotListed(t, role.Rules)
		rb := one[*rbacv1.RoleBinding](t, r, "outpost-operator", ns)
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "outpost-operator" || len(rb.Subjects) != 1 ||
			rb.Subjects[0].Name != "outpost-operator" || rb.Subjects[0].Namespace != "outpost-system" {
			t.Errorf("RoleBinding in %s: %+v %+v", ns, rb.RoleRef, rb.Subjects)
		}
	}
	if roles := all[*rbacv1.Role](r); len(roles) != 3 {
		t.Errorf("%d Roles, want one per watched namespace (a repeat counts once) and the state Role", len(roles))
	}
	_, c := operatorContainer(t, r, "outpost-operator")
	var ns []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--namespace="); ok {
			ns = append(ns, v)
		}
	}
	if !slices.Equal(ns, []string{"team-a", "team-b"}) {
		t.Errorf("--namespace flags %q", ns)
	}
	state := one[*rbacv1.Role](t, r, "outpost-operator-state", "outpost-system")
	for _, rule := range state.Rules {
		if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "pods") {
			t.Errorf("the state Role grants %+v", rule)
		}
	}
}

// TestOperatorDefaultPool: the default pool with a token value, a
// wildcard allow-list, a pod template, FilesystemSnapshot, a
// ServiceMonitor and a CA bundle.
func TestOperatorDefaultPool(t *testing.T) {
	t.Parallel()
	r := render(t, Operator, Options{ReleaseName: "outpost-operator", Namespace: "agents", Values: values(t, `
image: {digest: "sha256:`+strings.Repeat("ab", 32)+`"}
operator:
  watchNamespaces: [agents]
  defaultApiUrl: https://outpost.example.com
  allowedApiUrls: [https://outpost.example.com, "https://*.corp.example.com"]
  acceptorId: k8s-prod
  caBundle: {configMap: corp-ca}
metrics:
  serviceMonitor: {enabled: true, labels: {release: prom}, scrapeTimeout: 10s}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: outpost, effect: NoSchedule}]
defaultPool:
  enabled: true
  outpost: linux-containers
  apiUrl: https://eu.corp.example.com
  maxConcurrentSessions: 3
  restartLimit: 2
  token: {value: opt_secret_value}
  resume: {policy: FilesystemSnapshot, volumeSize: 5Gi, storageClassName: fast, snapshotTtlSeconds: 86400}
  network:
    enforcement: NetworkPolicy
    controlPlane: {to: [{ipBlock: {cidr: 10.96.12.0/24}}], ports: [{protocol: TCP, port: 443}]}
    dns: [{ipBlock: {cidr: 169.254.20.10/32}}]
  worker:
    template:
      metadata: {labels: {team: a}}
      spec:
        nodeSelector: {pool: agents}
        containers:
          - name: outpost-remote
            resources: {limits: {cpu: "2", memory: 4Gi}}
    overrides: {image: "registry.example.com/worker:1"}
`)})
	pool := one[*v1alpha1.OutpostPool](t, r, "outpost-operator-default", "agents")
	s := pool.Spec
	if s.Outpost != "linux-containers" || s.APIURL != "https://eu.corp.example.com" || *s.MaxConcurrentSessions != 3 ||
		*s.RestartLimit != 2 || s.TokenSecretRef.Name != "outpost-operator-default-token" || s.TokenSecretRef.Key != "token" {
		t.Errorf("pool spec %+v", s)
	}
	if s.Resume.Policy != v1alpha1.ResumeFilesystemSnapshot || s.Resume.VolumeSize.String() != "5Gi" ||
		*s.Resume.StorageClassName != "fast" || *s.Resume.SnapshotTTLSeconds != 86400 {
		t.Errorf("resume %+v", s.Resume)
	}
	if s.Worker.Template.Spec.NodeSelector["pool"] != "agents" || s.Worker.Template.Labels["team"] != "a" ||
		s.Worker.Template.Spec.Containers[0].Resources.Limits.Memory().String() != "4Gi" ||
		s.Worker.Overrides.Image != "registry.example.com/worker:1" || s.Worker.Overrides.Command != nil {
		t.Errorf("worker %+v", s.Worker)
	}
	if n := s.Network; n.Enforcement != v1alpha1.NetworkEnforcementNetworkPolicy || n.ControlPlane == nil ||
		n.ControlPlane.To[0].IPBlock.CIDR != "10.96.12.0/24" || n.ControlPlane.Ports[0].Port.IntValue() != 443 ||
		len(n.DNS) != 1 || n.DNS[0].IPBlock.CIDR != "169.254.20.10/32" {
		t.Errorf("network %+v", n)
	}
	sec := one[*corev1.Secret](t, r, "outpost-operator-default-token", "agents")
	if sec.StringData["token"] != "opt_secret_value" || sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("token Secret %+v", sec)
	}
	sm := one[*monitorObject](t, r, "outpost-operator", "agents")
	if sm.Labels["release"] != "prom" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" ||
		sm.Spec.Endpoints[0].ScrapeTimeout != "10s" || !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{"agents"}) {
		t.Errorf("ServiceMonitor %+v", sm.serviceMonitor)
	}
	svc := one[*corev1.Service](t, r, "outpost-operator-metrics", "agents")
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service lacks", k, v)
		}
	}
	d, c := operatorContainer(t, r, "outpost-operator")
	if !strings.HasSuffix(c.Image, "@sha256:"+strings.Repeat("ab", 32)) {
		t.Errorf("image %q, want the digest", c.Image)
	}
	for _, a := range []string{"--namespace=agents", "--default-api-url=https://outpost.example.com",
		"--allowed-api-url=https://outpost.example.com", "--allowed-api-url=https://*.corp.example.com",
		"--acceptor-id=k8s-prod", "--ca-file=/etc/outpost/ca/ca.crt"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %q lack %s", c.Args, a)
		}
	}
	ps := d.Spec.Template.Spec
	if ps.NodeSelector["kubernetes.io/os"] != "linux" || len(ps.Tolerations) != 1 || ps.Tolerations[0].Value != "outpost" {
		t.Errorf("placement %+v %+v", ps.NodeSelector, ps.Tolerations)
	}
	var ca bool
	for _, v := range ps.Volumes {
		ca = ca || (v.ConfigMap != nil && v.ConfigMap.Name == "corp-ca")
	}
	if !ca {
		t.Errorf("no volume of the ConfigMap corp-ca: %+v", ps.Volumes)
	}
}

// TestOperatorDefaultPoolExistingSecret: with existingSecret the chart
// writes no Secret and the pool names the given one.
func TestOperatorDefaultPoolExistingSecret(t *testing.T) {
	t.Parallel()
	r := render(t, Operator, Options{Namespace: "agents", Values: values(t, `
operator: {defaultApiUrl: "http://outpost-server.outpost.svc:7420"}
defaultPool: {enabled: true, outpost: gpu, token: {existingSecret: pool-token, key: pat}}
`)})
	if secrets := all[*corev1.Secret](r); len(secrets) != 0 {
		t.Errorf("Secrets rendered: %v", r.kinds())
	}
	pool := one[*v1alpha1.OutpostPool](t, r, "outpost-operator-default", "agents")
	if pool.Spec.TokenSecretRef != (v1alpha1.SecretKeyRef{Name: "pool-token", Key: "pat"}) || pool.Spec.APIURL != "" {
		t.Errorf("pool %+v", pool.Spec)
	}
	// Values left at their defaults leave the pool's fields unset, for the
	// CRD's defaults and the operator's.
	if w := pool.Spec.Worker; w.ContainerName != "" || w.Overrides.Image != "" || w.Overrides.Command != nil ||
		w.Overrides.Args != nil || len(w.Template.Spec.Containers) != 0 {
		t.Errorf("worker %+v", w)
	}
	if r := pool.Spec.Resume; r.VolumeSize != nil || r.StorageClassName != nil || r.SnapshotTTLSeconds != nil {
		t.Errorf("resume %+v", r)
	}
}

// TestOperatorAPIURLAllowList: the default pool's apiUrl must be an
// origin the allow-list admits, by the operator's rule; the tricks a
// hostile pool would try fail the render with a message saying what to do.
func TestOperatorAPIURLAllowList(t *testing.T) {
	t.Parallel()
	const allow = `allowedApiUrls: ["https://outpost.example.com", "https://*.corp.example.com", "http://10.0.0.5:7420"]`
	for _, tc := range []struct {
		operator, apiURL string
		ok               bool
	}{
		{allow, "https://outpost.example.com", true},
		{allow, "https://OUTPOST.example.com:443/", true},
		{allow, "https://eu.corp.example.com", true},
		{allow, "https://a.b.corp.example.com", false}, // one label only, as a TLS wildcard
		{allow, "https://eu.corp.example.com.", true},  // a trailing dot
		{allow, "http://10.0.0.5:7420", true},
		{allow, "https://corp.example.com", false},            // the wildcard's own domain
		{allow, "https://evilcorp.example.com", false},        // a suffix, not a subdomain
		{allow, "https://eu.corp.example.com.evil.io", false}, // a prefix
		{allow, "http://eu.corp.example.com", false},          // another scheme
		{allow, "https://eu.corp.example.com:8443", false},    // another port
		{allow, "https://outpost.example.com:8443", false},    // another port
		{allow, "http://10.0.0.5", false},                     // another port
		{allow, "https://outpost.example.com.evil.io", false}, // a longer host
		{`defaultApiUrl: "https://outpost.example.com"`, "https://outpost.example.com", true},
		{`defaultApiUrl: "https://outpost.example.com"`, "https://other.example.com", false},
		// The default is allowed besides the list.
		{`defaultApiUrl: "http://outpost-server.outpost.svc:7420", allowedApiUrls: ["https://outpost.example.com"]`, "http://outpost-server.outpost.svc:7420", true},
		{``, "https://outpost.example.com", false}, // nothing allowed
	} {
		opts := Options{Values: values(t, "operator: {"+tc.operator+"}\ndefaultPool: {enabled: true, outpost: x, token: {value: t}, apiUrl: \""+tc.apiURL+"\"}")}
		_, err := Render(t.Context(), Operator, opts)
		if tc.ok && err != nil {
			t.Errorf("%s with %s: %v", tc.apiURL, tc.operator, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "is not allowed: add its origin")) {
			t.Errorf("%s with %s: err %v, want not allowed", tc.apiURL, tc.operator, err)
		}
	}
}

// TestOperatorRefusals: values that cannot work fail the render with a
// sentence naming the value to fix; values of the wrong type or unknown
// keys fail on the schema.
func TestOperatorRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ values, want string }{
		{`defaultPool: {enabled: true, token: {value: t}}
operator: {defaultApiUrl: "https://o.example.com"}`, "defaultPool.outpost is required"},
		{`defaultPool: {enabled: true, outpost: x, token: {value: t}}`, "defaultPool.apiUrl or operator.defaultApiUrl is required"},
		{`defaultPool: {enabled: true, outpost: x}
operator: {defaultApiUrl: "https://o.example.com"}`, "defaultPool.token.value or defaultPool.token.existingSecret is required"},
		{`defaultPool: {enabled: true, outpost: x, token: {value: t, existingSecret: s}}
operator: {defaultApiUrl: "https://o.example.com"}`, "are exclusive"},
		{`defaultPool: {enabled: true, outpost: x, token: {value: t}}
operator: {defaultApiUrl: "https://o.example.com", watchNamespaces: [team-a]}`, `the default pool is made in the release's namespace "default", which operator.watchNamespaces does not list`},
		{`replicaCount: 2
operator: {leaderElect: false}`, "replicaCount > 1 needs operator.leaderElect"},
		{`metrics: {service: {enabled: false}, serviceMonitor: {enabled: true}}`, "metrics.serviceMonitor.enabled needs metrics.service.enabled"},
		{`serviceAccount: {create: false}`, "serviceAccount.name is required"},
		{`operator: {defaultApiUrl: "ftp://o.example.com"}`, "defaultApiUrl"},
		// The schema.
		{`replicaCount: two`, "replicaCount"},
		{`operator: {watchNamespaces: team-a}`, "watchNamespaces"},
		{`operator: {watchNamespace: team-a}`, "watchNamespace"},
		{`operator: {watchNamespaces: [Team_A]}`, "watchNamespaces"},
		{`operator: {allowedApiUrls: ["https://outpost.example.com@evil.io"]}`, "allowedApiUrls"},
		{`operator: {allowedApiUrls: ["https://outpost.example.com/v1"]}`, "allowedApiUrls"},
		{`metrics: {port: "8080"}`, "port"},
		{`leaderElect: true`, "leaderElect"},
		{`defaultPool: {resume: {policy: GkeSnapshot}}`, "policy"},
		{`defaultPool: {maxConcurrentSessions: -1}`, "maxConcurrentSessions"},
		{`defaultPool: {worker: {overrides: {imag: x}}}`, "imag"},
		{`image: {digest: "latest"}`, "digest"},
	} {
		if got := renderErr(t, Operator, Options{Values: values(t, tc.values)}); !strings.Contains(got, tc.want) {
			t.Errorf("values %s:\n got %s\nwant it to say %q", tc.values, got, tc.want)
		}
	}
}

// TestOperatorEgressProxy: off by default; enabled, the operator serves
// its egress proxy on the port, which the container declares and a
// Service named for pools' egressProxy.url fronts.
func TestOperatorEgressProxy(t *testing.T) {
	t.Parallel()
	r := render(t, Operator, Options{ReleaseName: "outpost-operator", Namespace: "outpost-system", Values: values(t, "")})
	_, c := operatorContainer(t, r, "outpost-operator")
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--egress-proxy-listen") {
			t.Errorf("egress proxy on by default: %q", a)
		}
	}
	r = render(t, Operator, Options{ReleaseName: "outpost-operator", Namespace: "outpost-system", Values: values(t, `
egressProxy: {enabled: true, port: 3129}
`)})
	_, c = operatorContainer(t, r, "outpost-operator")
	if !slices.Contains(c.Args, "--egress-proxy-listen=:3129") {
		t.Errorf("args %q", c.Args)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "egress-proxy" && p.ContainerPort == 3129 }) {
		t.Errorf("ports %+v", c.Ports)
	}
	svc := one[*corev1.Service](t, r, "outpost-operator-egress-proxy", "outpost-system")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 3129 || svc.Spec.Ports[0].TargetPort.StrVal != "egress-proxy" || len(svc.Spec.Selector) == 0 {
		t.Errorf("service %+v", svc.Spec)
	}
}
