package machine

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/outpost-sh/outpost/api"
)

// nvidiaQuery is what DetectGPUs asks nvidia-smi, one line per GPU. The
// CUDA version is not a --query-gpu field in the drivers we have seen, so
// it comes from the header of nvidia-smi's table.
var nvidiaQuery = []string{"--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"}

// rocmQuery is what DetectGPUs asks rocm-smi.
var rocmQuery = []string{"--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--json"}

// DetectGPUs reports the machine's GPUs through nvidia-smi and rocm-smi,
// each found on PATH (so a test can put a stand-in there) and run with a
// timeout; nil when neither finds any. A tool that fails or prints what
// cannot be read counts as none.
func DetectGPUs(ctx context.Context) []api.GPU {
	var nv, amd []api.GPU
	var wg sync.WaitGroup
	wg.Go(func() {
		out := probe(ctx, "nvidia-smi", nvidiaQuery...)
		if out == "" {
			return
		}
		gpus, err := ParseNvidiaSMI(out)
		if err != nil || len(gpus) == 0 {
			return
		}
		cuda := ParseNvidiaCUDAVersion(probe(ctx, "nvidia-smi"))
		for i := range gpus {
			gpus[i].CUDAVersion = cuda
		}
		nv = gpus
	})
	wg.Go(func() {
		if out := probe(ctx, "rocm-smi", rocmQuery...); out != "" {
			amd, _ = ParseROCmSMI(out)
		}
	})
	wg.Wait()
	return append(nv, amd...)
}

// ParseNvidiaSMI reads the output of nvidia-smi
// --query-gpu=name,memory.total,driver_version --format=csv,noheader
// (with or without nounits): one GPU a line.
func ParseNvidiaSMI(out string) ([]api.GPU, error) {
	var gpus []api.GPU
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("nvidia-smi line %q: want 3 fields, got %d", line, len(f))
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		g := api.GPU{Vendor: api.GPUVendorNVIDIA, Model: f[0], DriverVersion: notAvailable(f[2])}
		if mem := strings.TrimSpace(strings.TrimSuffix(f[1], "MiB")); notAvailable(mem) != "" {
			mib, err := strconv.ParseInt(mem, 10, 64)
			if err != nil || mib < 0 {
				return nil, fmt.Errorf("nvidia-smi line %q: memory %q is not a number of MiB", line, f[1])
			}
			g.MemoryBytes = mib << 20
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// notAvailable maps nvidia-smi's placeholders for a missing value to "".
func notAvailable(s string) string {
	switch s {
	case "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]":
		return ""
	}
	return s
}

// cudaVersionRE finds the CUDA version in nvidia-smi's table header:
// "CUDA Version: 12.7", or "CUDA UMD Version: 13.3" since driver R610.
var cudaVersionRE = regexp.MustCompile(`CUDA (?:UMD )?Version:\s*([0-9]+(?:\.[0-9]+)*)`)

// ParseNvidiaCUDAVersion returns the CUDA version the header of nvidia-smi's
// table names; "" when there is none.
func ParseNvidiaCUDAVersion(table string) string {
	if m := cudaVersionRE.FindStringSubmatch(table); m != nil {
		return m[1]
	}
	return ""
}

// ParseROCmSMI reads the JSON of rocm-smi --showproductname --showmeminfo
// vram [--showdriverversion] --json: an object per card ("card0", ...),
// ordered by card number. Keys changed case between ROCm releases ("Card
// series", "Card Series"), so they are matched without case.
func ParseROCmSMI(out string) ([]api.GPU, error) {
	var doc map[string]map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("rocm-smi JSON: %w", err)
	}
	driver := ""
	if sys, ok := doc["system"]; ok {
		driver = field(sys, "driver version")
	}
	var cards []string
	for k := range doc {
		if strings.HasPrefix(k, "card") {
			cards = append(cards, k)
		}
	}
	slices.SortFunc(cards, func(a, b string) int {
		na, _ := strconv.Atoi(strings.TrimPrefix(a, "card"))
		nb, _ := strconv.Atoi(strings.TrimPrefix(b, "card"))
		return na - nb
	})
	var gpus []api.GPU
	for _, k := range cards {
		c := doc[k]
		g := api.GPU{Vendor: api.GPUVendorAMD, Model: field(c, "card series"), DriverVersion: driver}
		if g.Model == "" {
			g.Model = field(c, "device name")
		}
		if v := field(c, "driver version"); v != "" {
			g.DriverVersion = v
		}
		if mem := field(c, "vram total memory (b)"); mem != "" {
			n, err := strconv.ParseInt(mem, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("rocm-smi %s: VRAM total %q is not a number of bytes", k, mem)
			}
			g.MemoryBytes = n
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// field is the string value of m's key named name, without case; "" when
// absent or not a string.
func field(m map[string]any, name string) string {
	for k, v := range m {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return strings.TrimSpace(s)
		}
	}
	return ""
}
