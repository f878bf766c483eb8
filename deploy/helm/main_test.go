package helm

import (
	"fmt"
	"os"
	"testing"
)

// buildDir holds binaries the tests build (args_test.go).
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outpost-helm-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
