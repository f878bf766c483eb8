package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outpost-sh/outpost/api"
)

const (
	// AcceptorConfigMap is the ConfigMap, in the operator's namespace,
	// that keeps the operator's acceptor id when --acceptor-id is not
	// given: made once at the first start, read by every later one, so that
	// a restarted operator (or the next leader) renews its claims.
	AcceptorConfigMap = "outpost-operator-acceptor-id"
	// AcceptorKey is the ConfigMap's key holding the id.
	AcceptorKey = "acceptor-id"
	// serviceAccountNamespaceFile names the namespace of the pod's service
	// account, in a cluster.
	serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// OperatorNamespace is the namespace the operator keeps its Lease and
// acceptor id in: given, else $POD_NAMESPACE, else the service account's
// namespace, else "default".
func OperatorNamespace(given string, getenv func(string) string) string {
	if given != "" {
		return given
	}
	if ns := strings.TrimSpace(getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// ResolveAcceptorID returns the operator's acceptor id: given when set,
// else the one in the ConfigMap AcceptorConfigMap of namespace, which it
// creates ("k8s-<namespace>-<8 random hex>") when there is none. Two
// operators starting at once agree: the second create fails and the id
// is read again. The id is made at run time, not by the chart, so that an
// upgrade never changes it.
func ResolveAcceptorID(ctx context.Context, c client.Client, namespace, given string) (string, error) {
	if given != "" {
		return given, api.ValidateAcceptorID(given)
	}
	key := client.ObjectKey{Namespace: namespace, Name: AcceptorConfigMap}
	for range 2 {
		var cm corev1.ConfigMap
		err := c.Get(ctx, key, &cm)
		if err == nil {
			id := strings.TrimSpace(cm.Data[AcceptorKey])
			if id == "" {
				return "", fmt.Errorf("ConfigMap %s/%s has no %q: delete it to make a new acceptor id (claims of the old one lapse), or pass --acceptor-id", namespace, AcceptorConfigMap, AcceptorKey)
			}
			if err := api.ValidateAcceptorID(id); err != nil {
				return "", fmt.Errorf("ConfigMap %s/%s: %w", namespace, AcceptorConfigMap, err)
			}
			return id, nil
		}
		if !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("read the acceptor id from ConfigMap %s/%s: %w", namespace, AcceptorConfigMap, err)
		}
		var r [4]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		id := "k8s-" + namespace + "-" + hex.EncodeToString(r[:])
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: AcceptorConfigMap,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "outpost-operator"}},
			Data: map[string]string{AcceptorKey: id},
		}
		err = c.Create(ctx, &cm)
		if err == nil {
			return id, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("save the acceptor id in ConfigMap %s/%s: %w", namespace, AcceptorConfigMap, err)
		}
		// Another operator made it meanwhile: read its id.
	}
	return "", fmt.Errorf("ConfigMap %s/%s was made and deleted while it was read", namespace, AcceptorConfigMap)
}
