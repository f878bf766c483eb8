package helm

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// serverPod returns the server's pod template, from its Deployment or
// StatefulSet, and its container.
func serverPod(t *testing.T, r rendered) (corev1.PodTemplateSpec, corev1.Container) {
	t.Helper()
	var pods []corev1.PodTemplateSpec
	for _, d := range all[*appsv1.Deployment](r) {
		pods = append(pods, d.Spec.Template)
	}
	for _, s := range all[*appsv1.StatefulSet](r) {
		pods = append(pods, s.Spec.Template)
	}
	if len(pods) != 1 || len(pods[0].Spec.Containers) != 1 {
		t.Fatalf("want one workload with one container: %v", r.kinds())
	}
	return pods[0], pods[0].Spec.Containers[0]
}

// env returns the container's variable name, or nil.
func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// flag returns the value of --name=value in args, and whether it is there.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestServerDefaults: one replica of a Deployment that replaces its pod
// (never two on the data dir), a claim for the data dir kept past an
// uninstall, the Service on 7420, the public URL of the Service, probes on
// /healthz and /readyz, hardened, no service-account token, SQLite.
func TestServerDefaults(t *testing.T) {
	t.Parallel()
	r := render(t, Server, Options{ReleaseName: "outpost", Namespace: "outpost"})
	want := []string{
		"PersistentVolumeClaim outpost/outpost-outpost-server-data",
		"Service outpost/outpost-outpost-server",
		"Deployment outpost/outpost-outpost-server",
	}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %q\nwant %q", got, want)
	}
	d := one[*appsv1.Deployment](t, r, "outpost-outpost-server", "outpost")
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d strategy %q", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod, c := serverPod(t, r)
	if c.Image != "ghcr.io/outpost-sh/outpost:0.1.0" || !slices.Equal(c.Command, []string{"outpost"}) || c.Args[0] != "server" {
		t.Errorf("image %q command %q args %q", c.Image, c.Command, c.Args)
	}
	for name, want := range map[string]string{
		"listen":     "0.0.0.0:7420",
		"data-dir":   "/var/lib/outpost",
		"public-url": "http://outpost-outpost-server.outpost.svc:7420",
		"log-format": "json",
	} {
		if got, _ := flag(c.Args, name); got != want {
			t.Errorf("--%s=%q, want %q", name, got, want)
		}
	}
	if _, ok := flag(c.Args, "database"); ok || env(c, "OUTPOST_DATABASE_URL") != nil {
		t.Error("a database URL with no database values")
	}
	checkHardened(t, pod.Spec, c)
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Error("the server's pod mounts a service-account token")
	}
	for probe, path := range map[*corev1.Probe]string{c.StartupProbe: "/healthz", c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "http" ||
			probe.HTTPGet.Scheme != corev1.URISchemeHTTP {
			t.Errorf("probe %+v, want GET %s on port http", probe, path)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 7420 {
		t.Errorf("ports %+v", c.Ports)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["data"] != "/var/lib/outpost" || mounts["tmp"] != "/tmp" {
		t.Errorf("mounts %v", mounts)
	}
	var claim string
	for _, v := range pod.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	pvc := one[*corev1.PersistentVolumeClaim](t, r, "outpost-outpost-server-data", "outpost")
	if claim != pvc.Name || pvc.Annotations["helm.sh/resource-policy"] != "keep" ||
		pvc.Spec.Resources.Requests.Storage().String() != "10Gi" {
		t.Errorf("data volume from claim %q; claim %+v", claim, pvc.ObjectMeta)
	}
	svc := one[*corev1.Service](t, r, "outpost-outpost-server", "outpost")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 7420 || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service ports %+v", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the pod lacks", k, v)
		}
	}
}

// TestServerIngress: the Ingress carries the WebSocket-friendly nginx
// annotations, routes to the Service, and its TLS host becomes the public
// URL.
func TestServerIngress(t *testing.T) {
	t.Parallel()
	r := render(t, Server, Options{Values: values(t, `
ingress:
  enabled: true
  className: nginx
  annotations: {nginx.ingress.kubernetes.io/proxy-body-size: null, cert-manager.io/cluster-issuer: letsencrypt}
  hosts: [{host: outpost.example.com}]
  tls: [{secretName: outpost-tls, hosts: [outpost.example.com]}]
`)})
	ing := one[*networkingv1.Ingress](t, r, "outpost-server", "default")
	for k, v := range map[string]string{
		"nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
		"nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
		"nginx.ingress.kubernetes.io/proxy-buffering":    "off",
		"cert-manager.io/cluster-issuer":                 "letsencrypt",
	} {
		if ing.Annotations[k] != v {
			t.Errorf("annotation %s=%q, want %q", k, ing.Annotations[k], v)
		}
	}
	if _, ok := ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"]; ok {
		t.Error("an annotation set to null is still there")
	}
	if *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "outpost.example.com" ||
		len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "outpost-tls" {
		t.Errorf("ingress spec %+v", ing.Spec)
	}
	p := ing.Spec.Rules[0].HTTP.Paths[0]
	if p.Path != "/" || *p.PathType != networkingv1.PathTypePrefix || p.Backend.Service.Name != "outpost-server" || p.Backend.Service.Port.Name != "http" {
		t.Errorf("path %+v", p)
	}
	_, c := serverPod(t, r)
	if got, _ := flag(c.Args, "public-url"); got != "https://outpost.example.com" {
		t.Errorf("--public-url=%q, want the ingress host over https", got)
	}
}

// TestServerPostgres: a PostgreSQL URL goes into a Secret and reaches the
// server as OUTPOST_DATABASE_URL from it, never as an argument; an
// existing Secret is used as given; the keys and admin token come from
// Secrets too; no persistence means an emptyDir.
func TestServerPostgres(t *testing.T) {
	t.Parallel()
	const url = "postgres://outpost:pw@db.internal:5432/outpost"
	r := render(t, Server, Options{Values: values(t, `
database: {url: "`+url+`"}
persistence: {enabled: false}
server:
  secretKey: {existingSecret: outpost-keys}
  adminToken: {existingSecret: outpost-admin, key: token}
  publicUrl: https://outpost.example.com
`)})
	sec := one[*corev1.Secret](t, r, "outpost-server-database", "default")
	if sec.StringData["url"] != url {
		t.Errorf("database Secret %+v", sec.StringData)
	}
	pod, c := serverPod(t, r)
	for name, ref := range map[string]corev1.SecretKeySelector{
		"OUTPOST_DATABASE_URL": {LocalObjectReference: corev1.LocalObjectReference{Name: "outpost-server-database"}, Key: "url"},
		"OUTPOST_SECRET_KEY":   {LocalObjectReference: corev1.LocalObjectReference{Name: "outpost-keys"}, Key: "secret-key"},
		"OUTPOST_ADMIN_TOKEN":  {LocalObjectReference: corev1.LocalObjectReference{Name: "outpost-admin"}, Key: "token"},
	} {
		e := env(c, name)
		if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || *e.ValueFrom.SecretKeyRef != ref {
			t.Errorf("%s: %+v, want from %+v", name, e, ref)
		}
	}
	for _, a := range c.Args {
		if strings.Contains(a, "pw@") {
			t.Errorf("the database password is in an argument: %s", a)
		}
	}
	if got, _ := flag(c.Args, "public-url"); got != "https://outpost.example.com" {
		t.Errorf("--public-url=%q", got)
	}
	if claims := all[*corev1.PersistentVolumeClaim](r); len(claims) != 0 {
		t.Errorf("claims with persistence off: %v", r.kinds())
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == "data" && v.EmptyDir == nil {
			t.Errorf("data volume %+v, want an emptyDir", v)
		}
	}

	r = render(t, Server, Options{Values: values(t, `database: {existingSecret: pg, key: dsn}`)})
	if secrets := all[*corev1.Secret](r); len(secrets) != 0 {
		t.Errorf("Secrets rendered for an existing one: %v", r.kinds())
	}
	_, c = serverPod(t, r)
	if e := env(c, "OUTPOST_DATABASE_URL"); e == nil || e.ValueFrom.SecretKeyRef.Name != "pg" || e.ValueFrom.SecretKeyRef.Key != "dsn" {
		t.Errorf("OUTPOST_DATABASE_URL %+v", e)
	}
}

// TestServerStatefulSet: kind StatefulSet takes its data claim from a
// template and is governed by a headless Service; the server's own TLS
// makes the probes HTTPS and the ingress's backend HTTPS.
func TestServerStatefulSet(t *testing.T) {
	t.Parallel()
	r := render(t, Server, Options{Values: values(t, `
kind: StatefulSet
persistence: {size: 50Gi, storageClassName: ssd}
server: {tls: {secretName: outpost-cert}}
ingress: {enabled: true, hosts: [{host: outpost.example.com, paths: [{path: /, pathType: Prefix}]}]}
`)})
	ss := one[*appsv1.StatefulSet](t, r, "outpost-server", "default")
	if ss.Spec.ServiceName != "outpost-server-headless" || len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("StatefulSet spec %+v", ss.Spec)
	}
	vct := ss.Spec.VolumeClaimTemplates[0]
	if vct.Name != "data" || *vct.Spec.StorageClassName != "ssd" || vct.Spec.Resources.Requests.Storage().String() != "50Gi" {
		t.Errorf("claim template %+v", vct)
	}
	if claims := all[*corev1.PersistentVolumeClaim](r); len(claims) != 0 {
		t.Errorf("a separate claim beside the StatefulSet's template: %v", r.kinds())
	}
	headless := one[*corev1.Service](t, r, "outpost-server-headless", "default")
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("headless Service clusterIP %q", headless.Spec.ClusterIP)
	}
	pod, c := serverPod(t, r)
	for _, v := range pod.Spec.Volumes {
		if v.Name == "data" {
			t.Errorf("the pod template has its own data volume %+v beside the claim template", v)
		}
	}
	if cert, _ := flag(c.Args, "tls-cert"); cert != "/etc/outpost/tls/tls.crt" {
		t.Errorf("--tls-cert=%q", cert)
	}
	if c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Error("probes are not HTTPS with the server's own TLS")
	}
	ing := one[*networkingv1.Ingress](t, r, "outpost-server", "default")
	if ing.Annotations["nginx.ingress.kubernetes.io/backend-protocol"] != "HTTPS" {
		t.Errorf("ingress annotations %v", ing.Annotations)
	}
	if got, _ := flag(c.Args, "public-url"); got != "http://outpost.example.com" {
		t.Errorf("--public-url=%q: an ingress host without TLS is http", got)
	}
}

// TestServerReplicas: several replicas on PostgreSQL with a shared key
// render, each pod told its own address and id through the downward API;
// a Deployment rolls one pod at a time, a StatefulSet keeps a claim per pod,
// and with the server's TLS the replica URL is https. One replica keeps
// neither flag nor the Recreate strategy's change.
func TestServerReplicas(t *testing.T) {
	t.Parallel()
	r := render(t, Server, Options{Values: values(t, `
replicaCount: 3
database: {existingSecret: pg}
persistence: {enabled: false}
server: {secretKey: {existingSecret: outpost-keys}}
`)})
	d := one[*appsv1.Deployment](t, r, "outpost-server", "default")
	if *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
		d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 || d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("Deployment replicas %d, strategy %+v; want 3 rolled one at a time", *d.Spec.Replicas, d.Spec.Strategy)
	}
	_, c := serverPod(t, r)
	if got, _ := flag(c.Args, "replica-url"); got != "http://$(POD_IP):7420" {
		t.Errorf("--replica-url=%q", got)
	}
	if got, _ := flag(c.Args, "replica-id"); got != "$(POD_NAME)" {
		t.Errorf("--replica-id=%q", got)
	}
	// Kubernetes expands $(VAR) only from variables defined before use
	// in env, or at all: both must be there, from the downward API.
	for name, path := range map[string]string{"POD_IP": "status.podIP", "POD_NAME": "metadata.name"} {
		e := env(c, name)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s: %+v, want from the field %s", name, e, path)
		}
	}

	r = render(t, Server, Options{Values: values(t, `
replicaCount: 2
kind: StatefulSet
database: {url: "postgres://db/outpost"}
server: {secretKey: {existingSecret: outpost-keys}, tls: {secretName: outpost-cert}}
`)})
	ss := one[*appsv1.StatefulSet](t, r, "outpost-server", "default")
	if *ss.Spec.Replicas != 2 || len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("StatefulSet replicas %d, claim templates %d", *ss.Spec.Replicas, len(ss.Spec.VolumeClaimTemplates))
	}
	_, c = serverPod(t, r)
	if got, _ := flag(c.Args, "replica-url"); got != "https://$(POD_IP):7420" {
		t.Errorf("--replica-url=%q with the server's TLS", got)
	}

	r = render(t, Server, Options{Values: values(t, `{database: {existingSecret: pg}, server: {secretKey: {existingSecret: k}}}`)})
	d = one[*appsv1.Deployment](t, r, "outpost-server", "default")
	_, c = serverPod(t, r)
	if _, ok := flag(c.Args, "replica-url"); ok || env(c, "POD_IP") != nil || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("one replica: args %q, strategy %s; want no replica flags and Recreate", c.Args, d.Spec.Strategy.Type)
	}
}

// TestServerRefusals: more than one replica without PostgreSQL, a shared
// key or a claim per pod, a database URL that is not PostgreSQL and other
// values that cannot work fail the render with a sentence; wrong types fail
// on the schema.
func TestServerRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ values, want string }{
		{`replicaCount: 2`, "replicaCount must be 1 with the embedded SQLite database"},
		{`{replicaCount: 2, kind: StatefulSet}`, "Several replicas need an external PostgreSQL database"},
		{`{replicaCount: 3, database: {url: "postgres://db/outpost"}, persistence: {enabled: false}}`, "needs server.secretKey.existingSecret"},
		{`{replicaCount: 3, database: {existingSecret: pg}, server: {secretKey: {existingSecret: k}}}`, "cannot share one ReadWriteOnce claim"},
		{`database: {url: "mysql://db/outpost"}`, "database.url must be a PostgreSQL URL"},
		{`database: {url: "postgres://db/o", existingSecret: pg}`, "are exclusive"},
		{`ingress: {enabled: true}`, "ingress.enabled needs ingress.hosts"},
		{`{kind: StatefulSet, persistence: {existingClaim: data}}`, "persistence.existingClaim is for kind Deployment"},
		// The schema.
		{`kind: DaemonSet`, "kind"},
		{`replicaCount: "1"`, "replicaCount"},
		{`persistence: {size: 10GB}`, "size"},
		{`persistence: {enabeld: true}`, "enabeld"},
		{`service: {port: 70000}`, "port"},
		{`server: {logFormat: xml}`, "logFormat"},
		{`server: {publicUrl: "outpost.example.com"}`, "publicUrl"},
		{`ingress: {hosts: [{name: outpost.example.com}]}`, "host"},
	} {
		if got := renderErr(t, Server, Options{Values: values(t, tc.values)}); !strings.Contains(got, tc.want) {
			t.Errorf("values %s:\n got %s\nwant it to say %q", tc.values, got, tc.want)
		}
	}
}
