package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestOutpostsPageShowsGPUsAndLabels: the outposts page's table of
// connected workers shows each one's GPUs and labels, and the page of a
// session no connected worker fits says why it waits.
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
	u := newUIUser(t, srv, tokens["admin"])
	body := u.page("/ui/outposts")
	for _, want := range []string{"2 × NVIDIA H200, 140.4 GiB each", "gpu=h200 region=eu"} {
		if !strings.Contains(body, want) {
			t.Errorf("the outposts page lacks %q", want)
		}
	}

	// A session no connected worker fits says so on its page.
	sess, err := srv.Client.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "gpu", Title: "big job",
		Requirements: &api.Requirements{GPUs: 4},
		Agent:        api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: []byte(`{"command":"true"}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	page := u.page("/ui/sessions/" + sess.Metadata.SessionID)
	if want := "Waiting for a machine with gpus ≥ 4; 1 worker connected, none fits."; !strings.Contains(page, want) {
		t.Errorf("the session page lacks %q", want)
	}
}
