//go:build !windows

package operator

import (
	"regexp"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAcceptorIDConfigMap: the first start makes the ConfigMap with a
// k8s-<namespace>-<8 hex> id, later starts read the same id, and starts at
// the same moment agree on one.
func TestAcceptorIDConfigMap(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	id, err := ResolveAcceptorID(ctx, kube, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^k8s-` + regexp.QuoteMeta(ns) + `-[0-9a-f]{8}$`).MatchString(id) {
		t.Fatalf("acceptor id %q, want k8s-%s-<8 hex>", id, ns)
	}
	again, err := ResolveAcceptorID(ctx, kube, ns, "")
	if err != nil || again != id {
		t.Fatalf("second start: %q, %v; want %q", again, err, id)
	}
	var cm corev1.ConfigMap
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: AcceptorConfigMap}, &cm); err != nil || cm.Data[AcceptorKey] != id {
		t.Fatalf("ConfigMap: %v, %v", cm.Data, err)
	}

	race := namespace(t, ctx)
	ids := make([]string, 4)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			var err error
			if ids[i], err = ResolveAcceptorID(ctx, kube, race, ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, got := range ids {
		if got != ids[0] {
			t.Fatalf("operators starting at once got ids %v", ids)
		}
	}
}

// TestAcceptorIDGiven: --acceptor-id wins and makes no ConfigMap; an
// invalid one, or a ConfigMap without the key, is an error that says what
// to do.
func TestAcceptorIDGiven(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t, ctx)
	if id, err := ResolveAcceptorID(ctx, kube, ns, "my-operator"); err != nil || id != "my-operator" {
		t.Fatalf("given id: %q, %v", id, err)
	}
	err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: AcceptorConfigMap}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a ConfigMap was made for a given id: %v", err)
	}
	if _, err := ResolveAcceptorID(ctx, kube, ns, "bad id!"); err == nil {
		t.Fatal("an invalid acceptor id was taken")
	}
	if err := kube.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: AcceptorConfigMap}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveAcceptorID(ctx, kube, ns, ""); err == nil {
		t.Fatal("a ConfigMap without the key gave an id")
	}
}

// TestOperatorNamespace: the flag, then POD_NAMESPACE, then (outside a
// cluster) "default".
func TestOperatorNamespace(t *testing.T) {
	t.Parallel()
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if ns := OperatorNamespace("flag", getenv); ns != "flag" {
		t.Errorf("given: %q", ns)
	}
	env["POD_NAMESPACE"] = "from-env"
	if ns := OperatorNamespace("", getenv); ns != "from-env" {
		t.Errorf("POD_NAMESPACE: %q", ns)
	}
	delete(env, "POD_NAMESPACE")
	if ns := OperatorNamespace("", getenv); ns != "default" {
		t.Errorf("nothing set: %q", ns)
	}
}
