package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesInStep: the CRD in deploy/crds and the deep-copy
// functions are what controller-gen makes of the types now. Run
// `go generate ./operator/...` after changing them.
func TestGeneratedFilesInStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out := t.TempDir()
	for _, args := range [][]string{
		{"tool", "controller-gen", "crd:maxDescLen=400", "paths=.", "output:crd:artifacts:config=" + out},
		{"tool", "controller-gen", "object", "paths=.", "output:object:dir=" + out},
	} {
		cmd := exec.Command(gobin, args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, b)
		}
	}
	for gen, committed := range map[string]string{
		"outpost.dev_outpostpools.yaml": "../../deploy/crds/outpost.dev_outpostpools.yaml",
		"zz_generated.deepcopy.go":      "zz_generated.deepcopy.go",
	} {
		want, err := os.ReadFile(filepath.Join(out, gen))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(committed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what controller-gen makes of the types: run go generate ./operator/...", committed)
		}
	}
}
