//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// gpuTools writes into a new directory a stand-in nvidia-smi that prints
// the captured --query-gpu output of a machine with two H200s, and the
// header of a real machine's table otherwise, as the real tool would.
func gpuTools(t *testing.T) string {
	t.Helper()
	csv, err := filepath.Abs("../../internal/machine/testdata/gpus/nvidia-smi-query-h200x2.csv")
	if err != nil {
		t.Fatal(err)
	}
	table, err := filepath.Abs("../../internal/machine/testdata/gpus/nvidia-smi-h100x8.txt")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) exec cat '" + csv + "' ;;\n*) exec cat '" + table + "' ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlacementTwoH200s runs two real workers, one on a machine whose
// nvidia-smi reports two H200s (a stand-in printing a capture) and labelled
// gpu=h200, one without GPUs: a session that needs two H200s runs on the
// first only, and one that needs four waits, saying why, while a session
// without requirements still runs.
func TestPlacementTwoH200s(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "gpu-h200")
	home, boxes := t.TempDir(), t.TempDir()
	tools := gpuTools(t)
	big, small := filepath.Join(boxes, "big"), filepath.Join(boxes, "small")
	for _, d := range []string{big, small} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := func(path string) []string {
		return []string{"PATH=" + path, "HOME=" + home, "OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + token,
			"OUTPOST_WORKER_ISOLATION=none"}
	}
	startExact(t, "worker big", append(env(tools+string(os.PathListSeparator)+os.Getenv("PATH")), "OUTPOST_WORKER_LABELS=gpu=h200,region=eu"),
		big, "worker", "start", "--outpost", "gpu-h200", "--acceptor-id", "big")
	startExact(t, "worker small", env(os.Getenv("PATH")), small, "worker", "start", "--outpost", "gpu-h200", "--acceptor-id", "small", "--label", "gpu=none")

	ws := waitWorkers(t, c, "gpu-h200", 2)
	for _, w := range ws {
		gpus := 0
		if w.Capabilities != nil {
			gpus = len(w.Capabilities.GPUs)
		}
		switch w.AcceptorID {
		case "big":
			if gpus != 2 || w.Capabilities.GPUs[0].Model != "NVIDIA H200" || w.Capabilities.GPUs[0].CUDAVersion != "12.7" || w.Labels["gpu"] != "h200" || w.Labels["region"] != "eu" {
				t.Fatalf("big worker reports %+v, labels %v", w.Capabilities, w.Labels)
			}
		case "small":
			if gpus != 0 || w.Labels["gpu"] != "none" {
				t.Fatalf("small worker reports %d GPUs, labels %v", gpus, w.Labels)
			}
		}
	}
	// The CLI shows them.
	out := run(t, c.env(c.admin), "workers", "list", "--outpost", "gpu-h200")
	if !strings.Contains(out, "2 × NVIDIA H200") || !strings.Contains(out, "gpu=h200") {
		t.Errorf("workers list shows:\n%s", out)
	}

	create := func(r *api.Requirements) string {
		t.Helper()
		req := api.CreateSessionRequest{Outpost: "gpu-h200", Title: "placed", Requirements: r,
			Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("pwd")}}}
		var s api.Session
		if code := c.api("POST", "/v1/sessions", c.admin, req, &s); code != 201 {
			t.Fatalf("create session: %d", code)
		}
		return s.Metadata.SessionID
	}
	four := create(&api.Requirements{GPUs: 4})
	var two []string
	for range 3 {
		two = append(two, create(&api.Requirements{GPUs: 2, GPUModel: "*H200*", Labels: map[string]string{"gpu": "h200"}}))
	}
	plain := create(nil)
	for _, id := range two {
		s := c.waitFinal(id, 2*time.Minute)
		requireFinished(t, s)
		if s.Status.Capabilities == nil || len(s.Status.Capabilities.GPUs) != 2 {
			t.Errorf("session %s ran on a machine with capabilities %+v, want the two H200s", id, s.Status.Capabilities)
		}
		if pwd := execOutput(t, c, id); !strings.HasPrefix(pwd, big) {
			t.Errorf("session %s ran in %q, want the big worker's %s", id, pwd, big)
		}
	}
	requireFinished(t, c.waitFinal(plain, 2*time.Minute))

	want := "Waiting for a machine with gpus ≥ 4; 2 workers connected, none fits."
	waitfor.Within(t, 10*time.Second, "the reason of the session needing 4 GPUs", func() bool {
		s := c.session(four)
		return s.Status.Status == api.StatusNew && s.Status.Reason == want
	})
}

// execOutput is the output the first exec call of a session printed.
func execOutput(t *testing.T, c *cluster, id string) string {
	t.Helper()
	for _, e := range c.events(id) {
		if e.Type == api.EventOutput && e.Text != "" {
			return strings.TrimSpace(e.Text)
		}
	}
	return ""
}
