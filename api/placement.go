package api

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// GPU is one accelerator of a machine, as its vendor's tool reports it.
type GPU struct {
	// Vendor is GPUVendorNVIDIA or GPUVendorAMD.
	Vendor string `json:"vendor"`
	// Model is the product name the tool prints ("NVIDIA H200").
	Model string `json:"model"`
	// MemoryBytes is the GPU's own memory (VRAM); 0 when unknown.
	MemoryBytes int64 `json:"memory_bytes"`
	// DriverVersion is the kernel driver's version; "" when unknown.
	DriverVersion string `json:"driver_version,omitempty"`
	// CUDAVersion is the highest CUDA version the driver supports (NVIDIA
	// only); "" when unknown.
	CUDAVersion string `json:"cuda_version,omitempty"`
}

// GPU vendors (GPU.Vendor).
const (
	GPUVendorNVIDIA = "nvidia"
	GPUVendorAMD    = "amd"
)

// MaxLabels bounds how many labels one worker reports.
const MaxLabels = 64

// labelKeyRE and labelValueRE are Kubernetes' label syntax: a key is an
// optional DNS-subdomain prefix and "/", then a name of at most 63
// alphanumerics, '-', '_' and '.', beginning and ending with an
// alphanumeric; a value is such a name or empty.
var (
	labelNameRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`) })
	labelPrefixRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	})
)

// LabelRule says in words what ValidateLabel accepts.
const LabelRule = "a key is up to 63 letters, digits, '-', '_' and '.' beginning and ending with a letter or digit, " +
	"optionally after a DNS prefix and '/' (as Kubernetes labels); a value is empty or follows the same rule"

// ValidateLabel returns an error when key=value is not a valid label: see
// LabelRule.
func ValidateLabel(key, value string) error {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		if len(prefix) > 253 || !labelPrefixRE().MatchString(prefix) {
			return fmt.Errorf("label key %q has a prefix that is not a DNS subdomain: %s", clip(key, 64), LabelRule)
		}
		name = rest
	}
	if !labelNameRE().MatchString(name) {
		if key == "" {
			return fmt.Errorf("a label key is required: %s", LabelRule)
		}
		return fmt.Errorf("label key %q is not valid: %s", clip(key, 64), LabelRule)
	}
	if value != "" && !labelNameRE().MatchString(value) {
		return fmt.Errorf("label %s has a value %q that is not valid: %s", key, clip(value, 64), LabelRule)
	}
	return nil
}

// ValidateLabels checks every label and their number (at most MaxLabels).
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels are too many: at most %d", len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := ValidateLabel(k, labels[k]); err != nil {
			return err
		}
	}
	return nil
}

// ParseLabels reads labels written KEY=VALUE, each element of specs one
// label or several separated by commas (the form of
// OUTPOST_WORKER_LABELS). A key given twice keeps its last value.
func ParseLabels(specs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, spec := range specs {
		for _, kv := range strings.Split(spec, ",") {
			kv = strings.TrimSpace(kv)
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("label %q is not KEY=VALUE", clip(kv, 64))
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if err := ValidateLabel(k, v); err != nil {
				return nil, err
			}
			out[k] = v
		}
	}
	if len(out) > MaxLabels {
		return nil, fmt.Errorf("%d labels are too many: at most %d", len(out), MaxLabels)
	}
	return out, nil
}

// Requirements say what machine a session needs. Every field is optional;
// labels match exactly and numbers are minimums.
type Requirements struct {
	// Labels must each be among the worker's labels, with the same value.
	Labels map[string]string `json:"labels,omitempty"`
	// CPUs and MemoryGiB are minimums of the machine's CPUs and memory
	// (GiB, 2^30 bytes).
	CPUs      int `json:"cpus,omitempty"`
	MemoryGiB int `json:"memory_gib,omitempty"`
	// GPUs is how many GPUs the machine needs at least; GPUMemoryGiB the
	// memory each of them needs at least, and GPUModel a pattern (Go's
	// path.Match syntax: '*', '?', '[...]') their model must match. With
	// GPUMemoryGiB or GPUModel and no GPUs, one GPU is needed.
	GPUs         int    `json:"gpus,omitempty"`
	GPUMemoryGiB int    `json:"gpu_memory_gib,omitempty"`
	GPUModel     string `json:"gpu_model,omitempty"`
}

// Limits of a Requirements value.
const (
	maxRequiredCPUs   = 1 << 16
	maxRequiredGiB    = 1 << 24
	maxRequiredGPUs   = 1 << 10
	maxGPUModelLength = 200
)

// IsZero reports whether r requires nothing.
func (r *Requirements) IsZero() bool {
	return r == nil || (len(r.Labels) == 0 && r.CPUs == 0 && r.MemoryGiB == 0 && r.GPUs == 0 && r.GPUMemoryGiB == 0 && r.GPUModel == "")
}

// Validate returns an error, a sentence naming the field, when r cannot be
// met by any machine's description.
func (r *Requirements) Validate() error {
	if r == nil {
		return nil
	}
	if err := ValidateLabels(r.Labels); err != nil {
		return fmt.Errorf("requirements.labels: %w", err)
	}
	for _, n := range []struct {
		name   string
		v, max int
	}{{"cpus", r.CPUs, maxRequiredCPUs}, {"memory_gib", r.MemoryGiB, maxRequiredGiB}, {"gpus", r.GPUs, maxRequiredGPUs}, {"gpu_memory_gib", r.GPUMemoryGiB, maxRequiredGiB}} {
		if n.v < 0 || n.v > n.max {
			return fmt.Errorf("requirements.%s must be a number from 0 to %d", n.name, n.max)
		}
	}
	if len(r.GPUModel) > maxGPUModelLength {
		return fmt.Errorf("requirements.gpu_model is at most %d characters", maxGPUModelLength)
	}
	if _, err := path.Match(r.GPUModel, ""); err != nil {
		return fmt.Errorf("requirements.gpu_model %q is not a valid pattern (use '*', '?' and '[...]')", clip(r.GPUModel, 64))
	}
	return nil
}

// MinGPUs is how many matching GPUs r needs: GPUs, or 1 when it only says
// what a GPU must be.
func (r *Requirements) MinGPUs() int {
	if r == nil {
		return 0
	}
	if r.GPUs == 0 && (r.GPUMemoryGiB > 0 || r.GPUModel != "") {
		return 1
	}
	return r.GPUs
}

// gib is 2^30 bytes.
const gib = 1 << 30

// ErrUnmet is what Unmet's errors match.
var ErrUnmet = errors.New("requirement not met")

// UnmetError names the first requirement a machine does not meet.
type UnmetError struct {
	// Requirement is the requirement in words ("gpus ≥ 2",
	// "label gpu=h200"); Have what the machine has instead ("0 GPUs").
	Requirement string `json:"requirement"`
	Have        string `json:"have"`
}

// Error says the requirement and what the machine has instead.
func (e *UnmetError) Error() string { return e.Requirement + " (it has " + e.Have + ")" }

// Unwrap makes the error match ErrUnmet.
func (e *UnmetError) Unwrap() error { return ErrUnmet }

// Unmet returns nil when a machine with capabilities c (nil: unknown, as
// nothing) and labels meets r, else an *UnmetError naming the first
// requirement it misses, in a fixed order: labels (by key), cpus,
// memory_gib, then the GPUs.
func (r *Requirements) Unmet(c *Capabilities, labels map[string]string) error {
	if r.IsZero() {
		return nil
	}
	if c == nil {
		c = &Capabilities{}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		want := r.Labels[k]
		got, ok := labels[k]
		if !ok {
			return &UnmetError{Requirement: "label " + k + "=" + want, Have: "no label " + k}
		}
		if got != want {
			return &UnmetError{Requirement: "label " + k + "=" + want, Have: k + "=" + got}
		}
	}
	if c.CPUs < r.CPUs {
		return &UnmetError{Requirement: "cpus ≥ " + strconv.Itoa(r.CPUs), Have: strconv.Itoa(c.CPUs)}
	}
	if c.MemoryBytes < int64(r.MemoryGiB)*gib {
		return &UnmetError{Requirement: "memory_gib ≥ " + strconv.Itoa(r.MemoryGiB), Have: formatGiB(c.MemoryBytes) + " GiB"}
	}
	need := r.MinGPUs()
	if need == 0 {
		return nil
	}
	fit := 0
	for _, g := range c.GPUs {
		if g.MemoryBytes >= int64(r.GPUMemoryGiB)*gib && matchModel(r.GPUModel, g.Model) {
			fit++
		}
	}
	if fit >= need {
		return nil
	}
	// Name the narrowest requirement that fails: the count alone when the
	// machine lacks GPUs at all, else what its GPUs are missing.
	switch {
	case len(c.GPUs) < need:
		return &UnmetError{Requirement: "gpus ≥ " + strconv.Itoa(need), Have: strconv.Itoa(len(c.GPUs))}
	case r.GPUModel != "" && countModel(c.GPUs, r.GPUModel) < need:
		return &UnmetError{Requirement: fmt.Sprintf("gpus ≥ %d of model %s", need, r.GPUModel), Have: describeGPUs(c.GPUs)}
	default:
		return &UnmetError{Requirement: fmt.Sprintf("gpus ≥ %d with gpu_memory_gib ≥ %d", need, r.GPUMemoryGiB), Have: describeGPUs(c.GPUs)}
	}
}

// matchModel reports whether model matches the pattern ("" matches all).
// Validate has checked the pattern; a bad one matches nothing.
func matchModel(pattern, model string) bool {
	if pattern == "" {
		return true
	}
	ok, err := path.Match(pattern, model)
	return ok && err == nil
}

func countModel(gpus []GPU, pattern string) int {
	n := 0
	for _, g := range gpus {
		if matchModel(pattern, g.Model) {
			n++
		}
	}
	return n
}

// describeGPUs says what a machine's GPUs are: "2 × NVIDIA H200 (140 GiB)".
func describeGPUs(gpus []GPU) string {
	if len(gpus) == 0 {
		return "no GPUs"
	}
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j < len(gpus) && gpus[j].Model == gpus[i].Model && gpus[j].MemoryBytes == gpus[i].MemoryBytes {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d × %s (%s GiB)", j-i, gpus[i].Model, formatGiB(gpus[i].MemoryBytes)))
		i = j
	}
	return strings.Join(parts, ", ")
}

// formatGiB writes n bytes in GiB with at most one decimal.
func formatGiB(n int64) string {
	return strconv.FormatFloat(math.Round(float64(n)/gib*10)/10, 'f', -1, 64)
}
