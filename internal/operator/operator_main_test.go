package operator

// This file holds the package's test harness as the pod runner's tests
// (runner_env_test.go) have it too, under the same names: drop it when
// they are merged, and have their TestMain set kubeConfig as well.

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

const testTimeout = 60 * time.Second

// kube is an uncached client of the package's kube-apiserver (envtest),
// and kubeConfig its configuration; nil when KUBEBUILDER_ASSETS is unset.
var (
	kube       client.Client
	kubeConfig *rest.Config
)

// TestMain starts one kube-apiserver and etcd for the package's tests
// (KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)); each test works
// in a namespace of its own.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(func() int {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			return m.Run()
		}
		env := &envtest.Environment{CRDDirectoryPaths: []string{"../../deploy/crds"}, ErrorIfCRDPathMissing: true}
		cfg, err := env.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "start envtest:", err)
			return 1
		}
		defer func() {
			if err := env.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stop envtest:", err)
			}
		}()
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			panic(err)
		}
		if err := v1alpha1.AddToScheme(scheme); err != nil {
			panic(err)
		}
		if kube, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
			fmt.Fprintln(os.Stderr, "kube client:", err)
			return 1
		}
		kubeConfig = cfg
		return m.Run()
	}())
}

// needKube skips t without an API server, or fails it when CI is set.
func needKube(t *testing.T) {
	t.Helper()
	if kube != nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset in CI: export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)")
	}
	t.Skip("KUBEBUILDER_ASSETS is unset: export KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh)")
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
