//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// sdkProgram is a program of another module, built on the public packages
// only: it creates an outpost, a machine token for it and a script session,
// follows the session's events to the end, and prints what it saw, one
// line each, so the test can start a worker once the outpost exists and
// compare the events with the transcript.
const sdkProgram = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(os.Getenv("OUTPOST_SERVER"), os.Getenv("OUTPOST_TOKEN"), client.WithUserAgent("sdk-example"))
	if err != nil {
		return err
	}
	o, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "sdk", Platform: api.PlatformLinux, Description: "made by the SDK"})
	if err != nil {
		return fmt.Errorf("create outpost: %w", err)
	}
	tok, err := c.Tokens.Create(ctx, api.CreateTokenRequest{Name: "sdk-worker", Scopes: []string{api.ScopeMachine}, Outpost: o.Spec.Name})
	if err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	fmt.Println("outpost", o.Metadata.OutpostID, tok.Secret)

	echo, _ := json.Marshal(api.ExecArgs{Command: "echo hello from the sdk"})
	write, _ := json.Marshal(api.WriteFileArgs{Path: "note.txt", Content: "written by a script\n"})
	read, _ := json.Marshal(api.ReadFileArgs{Path: "note.txt"})
	s, err := c.Sessions.Create(ctx, api.CreateSessionRequest{
		Outpost: o.Spec.Name,
		Title:   "sdk session",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			{Tool: api.ToolExec, Args: echo},
			{Tool: api.ToolWriteFile, Args: write},
			{Tool: api.ToolReadFile, Args: read},
		}},
	})
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	fmt.Println("session", s.Metadata.SessionID)

	err = c.Sessions.Follow(ctx, s.Metadata.SessionID, 0, func(ev api.Event) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		fmt.Println("event", string(b))
		return nil
	})
	if err != nil {
		return fmt.Errorf("follow session: %w", err)
	}
	s, err = c.Sessions.Get(ctx, s.Metadata.SessionID)
	if err != nil {
		return fmt.Errorf("get session: %w", err)
	}
	fmt.Println("final", s.Status.Status, s.Status.StatusDetail)
	return nil
}
`

// TestSDKFromAnotherModule: a module outside this one, which can import
// only the public packages (api and client), builds offline against this
// repository and drives a whole session with a real server and worker.
func TestSDKFromAnotherModule(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(readFileT(t, filepath.Join(root, "go.mod")))
	if goVersion == nil {
		t.Fatal("go.mod has no go line")
	}
	gomod := "module example.com/sdkuser\n\ngo " + string(goVersion[1]) + "\n\n" +
		"require github.com/outpost-sh/outpost v0.0.0\n\n" +
		"replace github.com/outpost-sh/outpost => " + root + "\n"
	writeFileT(t, filepath.Join(dir, "go.mod"), []byte(gomod))
	// Its checksums are this module's: the same dependencies.
	writeFileT(t, filepath.Join(dir, "go.sum"), readFileT(t, filepath.Join(root, "go.sum")))
	writeFileT(t, filepath.Join(dir, "main.go"), []byte(sdkProgram))

	prog := filepath.Join(dir, "sdkuser")
	build := exec.Command("go", "build", "-o", prog, ".")
	build.Dir = dir
	// Offline, from the module cache: nothing is downloaded.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of a module outside this one: %v\n%s", err, out)
	}

	c := startCluster(t)
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), "OUTPOST_SERVER="+c.url, "OUTPOST_TOKEN="+c.admin)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The program is stopped if the test gives up on it; the reader then
	// stops too.
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
	}()
	var (
		sessionID, final string
		printed          []api.Event
		raw              []string
	)
	timeout := time.After(90 * time.Second)
read:
	for {
		select {
		case <-timeout:
			t.Fatalf("the program did not finish; it printed %d events\nstderr: %s", len(printed), stderr.String())
		case line, ok := <-lines:
			if !ok {
				break read
			}
			kind, rest, _ := strings.Cut(line, " ")
			switch kind {
			case "outpost":
				_, token, _ := strings.Cut(rest, " ")
				startWorker(t, c, "sdk", token)
			case "session":
				sessionID = rest
			case "event":
				var ev api.Event
				if err := json.Unmarshal([]byte(rest), &ev); err != nil {
					t.Fatalf("the program printed a bad event %q: %v", rest, err)
				}
				printed = append(printed, ev)
				raw = append(raw, rest)
			case "final":
				final = rest
			default:
				t.Errorf("the program printed %q", line)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program failed: %v\nstderr: %s", err, stderr.String())
	}

	if want := api.StatusExit + " " + api.DetailFinished; final != want {
		t.Fatalf("the program saw the session end %q, want %q", final, want)
	}
	s := c.session(sessionID)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	// What the program followed is the transcript, event for event, up to
	// its end event (the claimer's release may follow it).
	transcript := c.events(sessionID)
	if len(printed) == 0 || printed[len(printed)-1].Type != api.EventEnd {
		t.Fatalf("the program's last event is not the end: %v", raw)
	}
	if len(printed) > len(transcript) {
		t.Fatalf("the program printed %d events, the transcript holds %d", len(printed), len(transcript))
	}
	for i := range printed {
		want, _ := json.Marshal(transcript[i])
		if raw[i] != string(want) {
			t.Errorf("event %d: the program printed %s, the transcript holds %s", i+1, raw[i], want)
		}
	}
	output := ""
	for _, ev := range printed {
		if ev.Type == api.EventOutput {
			output += ev.Text
		}
	}
	if !strings.Contains(output, "hello from the sdk") {
		t.Errorf("the followed output %q lacks the echo", output)
	}
	var sawRead bool
	for _, ev := range printed {
		if ev.Type == api.EventResult && ev.CallSeq > 0 && bytes.Contains(ev.Value, []byte("written by a script")) {
			sawRead = true
		}
	}
	if !sawRead {
		t.Error("no result carries the file the script wrote and read back")
	}
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFileT(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
