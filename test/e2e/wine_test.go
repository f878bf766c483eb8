//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// wineEnv makes TestWindowsWorkerUnderWine fail, rather than skip, where
// Debian's wine64 or gcc-mingw-w64-x86-64 is missing, as CI does
// (scripts/test-deps.sh installs both).
const wineEnv = "OUTPOST_TEST_WINE"

// TestWindowsWorkerUnderWine runs the windows/amd64 build of outpost as a
// worker under Wine against this Linux server over loopback: it serves a
// windows outpost's script session whose exec runs through cmd.exe (Wine's
// powershell.exe is a stub that prints nothing, so the probe must refuse
// it: in PowerShell `&` here is an error) and whose file tools write and
// read the workspace, and whose persistent shell (cmd.exe on Wine's
// pseudo console) keeps a directory and a variable between commands. There is no git for Windows under Wine: the worker
// says so and serves the session, which needs no repository.
func TestWindowsWorkerUnderWine(t *testing.T) {
	// Without Wine or MinGW the test skips, unless CI or OUTPOST_TEST_WINE
	// asks for it: then the missing tool is a failure.
	required := os.Getenv(wineEnv) != "" || os.Getenv("CI") != ""
	missing := func(what string) {
		t.Helper()
		if required {
			t.Fatalf("%s is not installed (apt-get install wine64 gcc-mingw-w64-x86-64; scripts/test-deps.sh does)", what)
		}
		t.Skipf("%s is not installed: this test runs the Windows build under Wine (apt-get install wine64 gcc-mingw-w64-x86-64)", what)
	}
	wine := "/usr/lib/wine/wine64"
	if _, err := os.Stat(wine); err != nil {
		if wine, err = exec.LookPath("wine64"); err != nil {
			missing("wine64")
		}
	}
	gcc, err := exec.LookPath("x86_64-w64-mingw32-gcc")
	if err != nil {
		missing("x86_64-w64-mingw32-gcc")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	runIn := func(env []string, name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	exe := filepath.Join(tmp, "outpost.exe")
	runIn([]string{"GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0"}, "go", "build", "-o", exe, "../../cmd/outpost")

	// A prefix of the test's own, with a ProcessPrng Go can call.
	prefix := filepath.Join(tmp, "prefix")
	wineVars := []string{"WINEPREFIX=" + prefix, "WINEDEBUG=-all", "WINEDLLOVERRIDES=mscoree,mshtml="}
	runIn(wineVars, wine, "wineboot", "--init")
	t.Cleanup(func() {
		// wineserver lingers a few seconds after the last program; stop it
		// now so the prefix can be removed.
		if ws, err := exec.LookPath("wineserver"); err == nil {
			cmd := exec.Command(ws, "-k")
			cmd.Env = append(os.Environ(), wineVars...)
			_ = cmd.Run()
		}
	})
	runIn(nil, gcc, "-shared", "-O2", "-Wl,--kill-at", "-o",
		filepath.Join(prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll"), "testdata/bcryptprimitives.c")

	c := startCluster(t)
	run(t, c.env(c.admin), "outposts", "create", "win", "--platform", "windows")
	var tok api.CreateTokenResponse
	raw := run(t, c.env(c.admin), "tokens", "create", "--scope", api.ScopeMachine, "--outpost", "win", "--name", "w-win", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &tok); err != nil {
		t.Fatal(err)
	}
	steps := []api.Step{
		{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"echo one & echo two & ver"}`)},
		{Tool: api.ToolWriteFile, Args: json.RawMessage(`{"path":"note.txt","content":"written under wine"}`)},
		{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"type note.txt"}`)},
		// A persistent cmd.exe on Wine's pseudo console keeps its state.
		{Tool: api.ToolShellStart, Args: json.RawMessage(`{"name":"main"}`)},
		{Tool: api.ToolShellRun, Args: json.RawMessage(`{"name":"main","command":"mkdir sub\ncd sub\nset KEPT=persisted"}`)},
		{Tool: api.ToolShellRun, Args: json.RawMessage(`{"name":"main","command":"echo %KEPT% in %CD% end"}`)},
		{Tool: api.ToolShellKill, Args: json.RawMessage(`{"name":"main"}`)},
	}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "win", Title: "wine",
		Agent: api.Agent{Kind: api.AgentScript, Steps: steps}})

	ws, data := filepath.Join(tmp, "ws"), filepath.Join(tmp, "wdata")
	worker := exec.CommandContext(ctx, wine, exe, "worker", "start", "--outpost", "win", "--once",
		"--dir", `Z:`+strings.ReplaceAll(ws, "/", `\`), "--data-dir", `Z:`+strings.ReplaceAll(data, "/", `\`))
	worker.Env = append(append(os.Environ(), c.env(tok.Secret)...), append(wineVars, api.EnvWorkerIsolation.Name+"=none")...)
	out, err := worker.CombinedOutput()
	if err != nil {
		t.Fatalf("the Windows worker under Wine: %v\n%s", err, out)
	}
	s := c.waitFinal(id, 30*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s\nworker:\n%s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason, out)
	}
	if s.Status.Capabilities == nil || s.Status.Capabilities.OS != "windows" {
		t.Errorf("served by %+v, want a windows remote", s.Status.Capabilities)
	}
	logs := run(t, c.env(c.admin), "sessions", "logs", id)
	for _, want := range []string{"one", "two", "Microsoft Windows", "written under wine", `persisted in Z:` + strings.ReplaceAll(ws, "/", `\`), `\sub end`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, logs)
		}
	}
	if !strings.Contains(string(out), "git is required but was not found") {
		t.Errorf("the worker did not say git is missing:\n%s", out)
	}

	// outpost doctor checks Windows' own prerequisites. git is missing
	// under Wine, so it exits 1.
	doc := exec.CommandContext(ctx, wine, exe, "doctor", "--dir", `Z:`+strings.ReplaceAll(ws, "/", `\`))
	doc.Env = append(append(os.Environ(), c.env(tok.Secret)...), wineVars...)
	docOut, err := doc.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("doctor under Wine: %v, want exit status 1 (git is missing)\n%s", err, docOut)
	}
	for _, want := range []string{"shell", "stub", "cmd.exe", "conpty", "the pseudo console (ConPTY) is there", "service", "admin", "workspace-acl"} {
		if !strings.Contains(string(docOut), want) {
			t.Errorf("doctor's output lacks %q:\n%s", want, docOut)
		}
	}
	t.Logf("doctor under Wine:\n%s", docOut)
}
