package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostsPageShowsGPUsAndLabels: the outposts page's table of
// connected workers shows each one's GPUs and labels.
func TestOutpostsPageShowsGPUsAndLabels(t *testing.T) {
	t.Parallel()
	srv, tokens := startUI(t)
	ctx := context.Background()
	if _, err := srv.Client.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "gpu", Platform: api.PlatformLinux}); err != nil {
		t.Fatal(err)
	}
	gpu := api.GPU{Vendor: api.GPUVendorNVIDIA, Model: "NVIDIA H200", MemoryBytes: 143771 << 20, DriverVersion: "580.178.04"}
	info := api.WorkerInfo{Kind: api.WorkerKindWorker, Hostname: "box", MaxSessions: 1, Labels: map[string]string{"gpu": "h200", "region": "eu"},
		Capabilities: &api.Capabilities{OS: "linux", Arch: "amd64", CPUs: 32, GPUs: []api.GPU{gpu, gpu}}}
	if _, err := srv.Client.Workers.Heartbeat(ctx, "gpu", "big", info); err != nil {
		t.Fatal(err)
	}
	body := newUIUser(t, srv, tokens["admin"]).page("/ui/outposts")
	for _, want := range []string{"2 × NVIDIA H200, 140.4 GiB each", "gpu=h200 region=eu"} {
		if !strings.Contains(body, want) {
			t.Errorf("the outposts page lacks %q", want)
		}
	}
}
