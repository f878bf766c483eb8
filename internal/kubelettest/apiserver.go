//go:build !windows

package kubelettest

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AssetsEnv names the directory of kube-apiserver and etcd
// (scripts/envtest-assets.sh prints it).
const AssetsEnv = "KUBEBUILDER_ASSETS"

// RequireAssets skips t when KUBEBUILDER_ASSETS is unset, and fails it
// instead when CI is set (CI prepares them).
func RequireAssets(t testing.TB) {
	t.Helper()
	if os.Getenv(AssetsEnv) != "" {
		return
	}
	const how = "KUBEBUILDER_ASSETS is unset (export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh))"
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set but " + how)
	}
	t.Skip(how)
}

// StartAPIServer starts a kube-apiserver and etcd from KUBEBUILDER_ASSETS
// with the CRDs of crdDirs installed, and returns them with an admin's
// config. The caller stops the environment.
func StartAPIServer(crdDirs ...string) (*envtest.Environment, *rest.Config, error) {
	if os.Getenv(AssetsEnv) == "" {
		return nil, nil, fmt.Errorf("%s is unset", AssetsEnv)
	}
	env := &envtest.Environment{CRDDirectoryPaths: crdDirs, ErrorIfCRDPathMissing: len(crdDirs) > 0}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	return env, cfg, nil
}
