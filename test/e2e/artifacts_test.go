//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestArtifacts uploads files from a worker's remote to the server with the
// upload_artifact tool, lists them with the API and downloads one with the
// CLI.
func TestArtifacts(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "arts")
	_, workspace := startWorker(t, c, "arts", token)

	steps := []api.Step{
		{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"head -c 1234567 /dev/urandom > data.bin && printf 'hello' > note.txt && truncate -s 101M big.bin"}`)},
		{Tool: api.ToolUploadArtifact, Args: json.RawMessage(`{"path":"data.bin"}`)},
		{Tool: api.ToolUploadArtifact, Args: json.RawMessage(`{"path":"note.txt","name":"greeting.txt"}`)},
		{Tool: api.ToolUploadArtifact, Args: json.RawMessage(`{"path":"big.bin"}`), ContinueOnError: true},
		{Tool: api.ToolUploadArtifact, Args: json.RawMessage(`{"path":"note.txt","name":"../etc/passwd"}`), ContinueOnError: true},
	}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "arts", Agent: api.Agent{Kind: api.AgentScript, Steps: steps}})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}

	var list api.ArtifactList
	if code := c.api("GET", "/v1/sessions/"+id+"/artifacts", c.admin, nil, &list); code != 200 {
		t.Fatalf("list artifacts: %d", code)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "data.bin" || list.Items[0].Size != 1234567 ||
		list.Items[1].Name != "greeting.txt" || !strings.HasPrefix(list.Items[1].ContentType, "text/plain") {
		t.Fatalf("artifacts %+v", list.Items)
	}

	// The oversize file and the bad name were refused with clear errors.
	errs := map[int64]string{}
	for _, e := range c.events(id) {
		if e.Type == api.EventResult {
			errs[e.CallSeq] = e.Error
		}
	}
	if !strings.Contains(errs[4], "over the artifact limit of 100 MiB") {
		t.Errorf("oversize upload: %q", errs[4])
	}
	if !strings.Contains(errs[5], `artifact name "../etc/passwd" is not valid`) {
		t.Errorf("bad name: %q", errs[5])
	}
	// A name that makes the path non-canonical is refused before any route.
	if code := c.api("GET", "/v1/sessions/"+id+"/artifacts/..%2Fdata.bin", c.admin, nil, nil); code != 400 {
		t.Errorf("download of a bad name: %d, want 400", code)
	}

	// Download with the CLI and compare the bytes.
	want, err := os.ReadFile(filepath.Join(workspace, "data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "copy.bin")
	run(t, c.env(c.admin), "sessions", "artifacts", id, "--get", "data.bin", "--out", out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("downloaded %d bytes that differ from the %d uploaded", len(got), len(want))
	}
	table := run(t, c.env(c.admin), "sessions", "artifacts", id)
	if !strings.Contains(table, "greeting.txt") || !strings.Contains(table, "1234567") {
		t.Fatalf("artifacts table:\n%s", table)
	}
	// An unknown artifact is a clear error, and nothing is written.
	outDir := t.TempDir()
	msg := runFail(t, c.env(c.admin), "sessions", "artifacts", id, "--get", "nope.txt", "--out", filepath.Join(outDir, "x"))
	if !strings.Contains(msg, "no artifact") {
		t.Fatalf("unknown artifact: %q", msg)
	}
	if entries, _ := os.ReadDir(outDir); len(entries) != 0 {
		t.Errorf("a failed download left %d files in the --out directory", len(entries))
	}
}

// runFail runs the binary, which must fail, and returns its standard error.
func runFail(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("outpost %s succeeded, want a failure", strings.Join(args, " "))
	}
	return stderr.String()
}
