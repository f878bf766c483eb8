package api

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels([]string{"gpu=h200", "region=eu, team=ml", "example.com/pool=a-1", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gpu": "h200", "region": "eu", "team": "ml", "example.com/pool": "a-1", "empty": ""}
	if len(got) != len(want) {
		t.Fatalf("labels = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{"gpu", "=x", "-a=b", "a=b c", "a=" + strings.Repeat("x", 64), strings.Repeat("k", 64) + "=v", "Bad_Prefix/a=b", "a=é"} {
		if _, err := ParseLabels([]string{bad}); err == nil {
			t.Errorf("ParseLabels(%q) accepted it", bad)
		}
	}
	many := make([]string, MaxLabels+1)
	for i := range many {
		many[i] = "k" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + "=v"
	}
	if l, err := ParseLabels(many); err == nil && len(l) > MaxLabels {
		t.Errorf("ParseLabels took %d labels", len(l))
	}
}

func TestRequirementsValidate(t *testing.T) {
	ok := []Requirements{{}, {Labels: map[string]string{"gpu": "h200"}, CPUs: 8, MemoryGiB: 64, GPUs: 2, GPUMemoryGiB: 80, GPUModel: "*H200*"}}
	for _, r := range ok {
		if err := r.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", r, err)
		}
	}
	bad := map[string]Requirements{
		"requirements.cpus":      {CPUs: -1},
		"requirements.gpus":      {GPUs: 1 << 20},
		"requirements.gpu_model": {GPUModel: "[H200"},
		"requirements.labels":    {Labels: map[string]string{"a b": "c"}},
	}
	for field, r := range bad {
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", r, err, field)
		}
	}
}

func h200s(n int) []GPU {
	g := make([]GPU, n)
	for i := range g {
		g[i] = GPU{Vendor: GPUVendorNVIDIA, Model: "NVIDIA H200", MemoryBytes: 143771 << 20}
	}
	return g
}

func TestRequirementsUnmet(t *testing.T) {
	big := &Capabilities{CPUs: 64, MemoryBytes: 512 << 30, GPUs: h200s(2)}
	labels := map[string]string{"gpu": "h200", "region": "eu"}
	cases := []struct {
		r    Requirements
		c    *Capabilities
		want string // "" when met
	}{
		{Requirements{}, nil, ""},
		{Requirements{GPUs: 2, GPUModel: "*H200*", GPUMemoryGiB: 140, Labels: map[string]string{"gpu": "h200"}}, big, ""},
		{Requirements{GPUs: 4}, big, "gpus ≥ 4 (it has 2)"},
		{Requirements{GPUs: 2}, &Capabilities{CPUs: 2}, "gpus ≥ 2 (it has 0)"},
		{Requirements{GPUs: 2}, nil, "gpus ≥ 2 (it has 0)"},
		{Requirements{GPUModel: "*A100*"}, big, "gpus ≥ 1 of model *A100* (it has 2 × NVIDIA H200 (140.4 GiB))"},
		{Requirements{GPUs: 1, GPUMemoryGiB: 141}, big, "gpus ≥ 1 with gpu_memory_gib ≥ 141 (it has 2 × NVIDIA H200 (140.4 GiB))"},
		{Requirements{CPUs: 128}, big, "cpus ≥ 128 (it has 64)"},
		{Requirements{MemoryGiB: 1024}, big, "memory_gib ≥ 1024 (it has 512 GiB)"},
		{Requirements{Labels: map[string]string{"gpu": "a100"}}, big, "label gpu=a100 (it has gpu=h200)"},
		{Requirements{Labels: map[string]string{"zone": "b"}}, big, "label zone=b (it has no label zone)"},
	}
	for _, tc := range cases {
		err := tc.r.Unmet(tc.c, labels)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Unmet(%+v) = %v, want met", tc.r, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrUnmet) {
			t.Errorf("Unmet(%+v) = %v, want %q", tc.r, err, tc.want)
		}
	}
}
