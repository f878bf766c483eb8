package remote

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestPowerShellStubIsNotPowerShell: a powershell on PATH that prints
// nothing and exits 0 (Wine ships one) is not taken for PowerShell; the
// default shell is then cmd.exe, which runs a line with quotes and an
// ampersand as typed.
func TestPowerShellStubIsNotPowerShell(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "powershell.bat"), []byte("@exit /b 0\r\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if powerShellWorks(context.Background()) {
		t.Fatal("a powershell that prints nothing was taken for PowerShell")
	}
	if got := defaultShell(context.Background()); got != "cmd" {
		t.Fatalf("defaultShell = %q, want cmd", got)
	}
	tc := newTestCall(t, t.TempDir(), nil)
	var res api.ExecResult
	if err := tc.run(t, context.Background(), api.ToolExec, api.ExecArgs{Command: `echo "a b" & echo second`}, &res); err != nil {
		t.Fatal(err)
	}
	out := tc.output(api.StreamStdout)
	if !strings.Contains(out, `"a b"`) || !strings.Contains(out, "second") {
		t.Errorf("cmd printed %q", out)
	}
}

// TestSessionJobKillsOnClose: the remote enters a kill-on-close Job Object.
func TestSessionJobKillsOnClose(t *testing.T) {
	if err := holdSessionJob(); err != nil {
		t.Fatal(err)
	}
	if sessionJob.h == 0 {
		t.Fatal("no session job handle")
	}
}
