package machine

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "gpus", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseNvidiaSMI(t *testing.T) {
	gpus, err := ParseNvidiaSMI(readTestdata(t, "nvidia-smi-query-h200x2.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := api.GPU{Vendor: "nvidia", Model: "NVIDIA H200", MemoryBytes: 143771 << 20, DriverVersion: "580.178.04"}
	if len(gpus) != 2 || gpus[0] != want || gpus[1] != want {
		t.Fatalf("gpus = %+v, want 2 × %+v", gpus, want)
	}
	// The units form (without nounits) and a missing value.
	gpus, err = ParseNvidiaSMI("NVIDIA A100-SXM4-80GB, 81920 MiB, [N/A]\n")
	if err != nil || len(gpus) != 1 || gpus[0].MemoryBytes != 81920<<20 || gpus[0].DriverVersion != "" {
		t.Fatalf("gpus = %+v, %v", gpus, err)
	}
	for _, bad := range []string{"NVIDIA H200, 143771", "NVIDIA H200, lots, 580.1"} {
		if _, err := ParseNvidiaSMI(bad); err == nil {
			t.Errorf("ParseNvidiaSMI(%q) read it", bad)
		}
	}
}

func TestParseNvidiaCUDAVersion(t *testing.T) {
	for file, want := range map[string]string{"nvidia-smi-h100x8.txt": "12.7", "nvidia-smi-b200x2.txt": "13.3"} {
		if got := ParseNvidiaCUDAVersion(readTestdata(t, file)); got != want {
			t.Errorf("%s: CUDA version %q, want %q", file, got, want)
		}
	}
	if got := ParseNvidiaCUDAVersion("NVIDIA-SMI has failed"); got != "" {
		t.Errorf("CUDA version of an error %q", got)
	}
}

func TestParseROCmSMI(t *testing.T) {
	gpus, err := ParseROCmSMI(readTestdata(t, "rocm-smi-rx7900xt.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := api.GPU{Vendor: "amd", Model: "Radeon RX 7900 XT", MemoryBytes: 21458059264}
	if len(gpus) != 1 || gpus[0] != want {
		t.Fatalf("gpus = %+v, want %+v", gpus, want)
	}
	if _, err := ParseROCmSMI("ERROR: no GPUs"); err == nil {
		t.Error("ParseROCmSMI read text that is not JSON")
	}
}

// TestDetectGPUsRunsTheTools runs stand-ins of nvidia-smi and rocm-smi
// from PATH that print captured output of real machines, as the real
// tools would on them.
func TestDetectGPUsRunsTheTools(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-ins are shell scripts")
	}
	dir := t.TempDir()
	fakeGPUTools(t, dir, filepath.Join("testdata", "gpus", "nvidia-smi-query-h200x2.csv"), filepath.Join("testdata", "gpus", "rocm-smi-rx7900xt.json"))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	gpus := DetectGPUs(context.Background())
	if len(gpus) != 3 {
		t.Fatalf("gpus = %+v, want 2 NVIDIA and 1 AMD", gpus)
	}
	if gpus[0].Model != "NVIDIA H200" || gpus[0].CUDAVersion != "12.7" || gpus[2].Vendor != "amd" {
		t.Errorf("gpus = %+v", gpus)
	}
	t.Setenv("PATH", t.TempDir())
	if gpus := DetectGPUs(context.Background()); gpus != nil {
		t.Errorf("gpus without the tools = %+v", gpus)
	}
}

// fakeGPUTools writes into dir a stand-in nvidia-smi that prints the file
// csv for nvidia-smi's --query-gpu and a table header (of an H100 machine,
// CUDA 12.7) otherwise, and, when rocm is not "", a stand-in rocm-smi that
// prints the file rocm. Tests put dir first on PATH so that DetectGPUs
// runs them, as it would the real tools. Paths are made absolute.
func fakeGPUTools(t testing.TB, dir, csv, rocm string) {
	t.Helper()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	nv := "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) exec cat '" + abs(csv) + "' ;;\n*) echo '| NVIDIA-SMI 565.57.01              Driver Version: 565.57.01      CUDA Version: 12.7     |' ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(nv), 0o755); err != nil {
		t.Fatal(err)
	}
	if rocm != "" {
		if err := os.WriteFile(filepath.Join(dir, "rocm-smi"), []byte("#!/bin/sh\nexec cat '"+abs(rocm)+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestParseOSRelease(t *testing.T) {
	if got := parseOSRelease("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\n"); got != "Ubuntu 24.04.1 LTS" {
		t.Errorf("PRETTY_NAME = %q", got)
	}
}

func TestDiskFreeBytes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("statfs is read on Unix")
	}
	if n := DiskFreeBytes(t.TempDir()); n <= 0 {
		t.Errorf("free bytes of a temporary directory = %d", n)
	}
	if n := DiskFreeBytes(filepath.Join(t.TempDir(), "missing")); n != 0 {
		t.Errorf("free bytes of a missing directory = %d", n)
	}
}
