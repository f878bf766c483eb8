package osservice

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ from the code as it is")

// golden compares got with testdata/name, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the code's output (go test -run %s -update rewrites it); got:\n%s", path, t.Name(), got)
	}
}

func testService() WindowsService {
	return NewWorkerWindowsService(WindowsServiceOptions{
		Outpost: "win-x64", Executable: `C:\Program Files\Outpost\outpost.exe`,
		ConfigFile: `C:\ProgramData\outpost\worker-win-x64.yaml`, TokenFile: `C:\ProgramData\outpost\worker-win-x64.token`,
		DataDir: `C:\ProgramData\outpost\worker-win-x64`, Dir: `D:\work spaces\win`,
	})
}

// TestWindowsServiceGolden: the service a worker install creates — its
// command line, start type, account, recovery actions and log — as the
// dry run shows it.
func TestWindowsServiceGolden(t *testing.T) {
	t.Parallel()
	s := testService()
	golden(t, "windows-service.golden", []byte(s.Describe()))
	if s.EventSource != s.Name {
		t.Errorf("event source %q; want the service's name %q", s.EventSource, s.Name)
	}
	if len(s.Recovery) != 3 || s.Recovery[0] != 5*time.Second || s.ResetPeriod != 24*time.Hour {
		t.Errorf("recovery %v reset %v", s.Recovery, s.ResetPeriod)
	}
	withFile := NewWorkerWindowsService(WindowsServiceOptions{Outpost: "w", Executable: `C:\o.exe`, ConfigFile: `C:\c.yaml`, LogFile: `C:\logs\w.log`})
	if withFile.EventSource != "" || !LogFileGiven(withFile.Args) || !strings.Contains(withFile.Describe(), "the file of --log-file") {
		t.Errorf("a service with --log-file: source %q, args %q", withFile.EventSource, withFile.Args)
	}
}

// TestEscapeWindowsArg: the rule CommandLineToArgvW parses, as
// syscall.EscapeArg writes it (the Windows-only test compares the two).
func TestEscapeWindowsArg(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		``:                         `""`,
		`plain`:                    `plain`,
		`C:\Program Files\o.exe`:   `"C:\Program Files\o.exe"`,
		`C:\dir\`:                  `C:\dir\`,
		`C:\my dir\`:               `"C:\my dir\\"`,
		`say "hi"`:                 `"say \"hi\""`,
		`a\"b`:                     `a\\\"b`,
		"tab\there":                "\"tab\there\"",
		`C:\ProgramData\outpost\x`: `C:\ProgramData\outpost\x`,
	} {
		if got := EscapeWindowsArg(in); got != want {
			t.Errorf("EscapeWindowsArg(%q) = %s; want %s", in, got, want)
		}
	}
}

// TestServiceNameFromArgs: a worker started by the service manager finds
// its Event Log source in its own command line.
func TestServiceNameFromArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{testService().Args, "outpost-worker-win-x64"},
		{[]string{"worker", "start", "--outpost=gpu"}, "outpost-worker-gpu"},
		{[]string{"worker", "start", "--outpost"}, ""},
		{[]string{"worker", "start"}, ""},
	} {
		if got := WindowsServiceNameFromArgs(tc.args); got != tc.want {
			t.Errorf("WindowsServiceNameFromArgs(%q) = %q; want %q", tc.args, got, tc.want)
		}
	}
}

// TestRecordLevel: Event Log entries take the level of slog's text and
// JSON records.
func TestRecordLevel(t *testing.T) {
	t.Parallel()
	for rec, want := range map[string]string{
		`time=2026-01-01T00:00:00Z level=ERROR msg="claim failed"`: LevelError,
		`time=2026-01-01T00:00:00Z level=WARN msg="no git"`:        LevelWarn,
		`time=2026-01-01T00:00:00Z level=INFO msg=claimed`:         LevelInfo,
		`{"time":"x","level":"ERROR","msg":"m"}`:                   LevelError,
		`{"time":"x","level":"WARN+2","msg":"m"}`:                  LevelWarn,
		`Error: the server refused the token`:                      LevelInfo,
	} {
		if got := RecordLevel(rec); got != want {
			t.Errorf("RecordLevel(%q) = %s; want %s", rec, got, want)
		}
	}
}

func testJob() LaunchdJob {
	return LaunchdJob{
		Label:            LaunchdLabel("minis"),
		ProgramArguments: []string{"/usr/local/bin/outpost", "worker", "start", "--outpost", "minis", "--config", "/etc/outpost/worker-minis.yaml"},
		UserName:         "ci",
		WorkingDirectory: "/var/lib/outpost/workspace-minis",
		Environment:      map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/Users/ci"},
		StdoutPath:       "/var/log/outpost/worker-minis.log", StderrPath: "/var/log/outpost/worker-minis.log",
		ExitTimeout: 60,
	}
}

// TestLaunchdPlistGolden: the LaunchDaemon's and the LaunchAgent's
// property lists, byte for byte.
func TestLaunchdPlistGolden(t *testing.T) {
	t.Parallel()
	daemon, err := testJob().Plist()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "launchdaemon.plist", daemon)
	a := testJob()
	a.UserName, a.Agent = "", true
	agent, err := a.Plist()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "launchagent.plist", agent)
	if LaunchdDomain(true, 501) != "gui/501" || LaunchdDomain(false, 501) != "system" {
		t.Errorf("domains %s, %s", LaunchdDomain(true, 501), LaunchdDomain(false, 501))
	}
}

// TestLaunchdPlistEscapes: text that is markup (a path with & and <)
// comes back as written when an XML parser reads the plist.
func TestLaunchdPlistEscapes(t *testing.T) {
	t.Parallel()
	j := testJob()
	odd := `/Users/r&d/<work> "x"`
	j.WorkingDirectory = odd
	b, err := j.Plist()
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plist is not well-formed XML: %v\n%s", err, b)
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			texts = append(texts, string(cd))
		}
	}
	found := false
	for i, s := range texts {
		if s == "WorkingDirectory" && i+1 < len(texts) {
			found = texts[i+1] == odd
		}
	}
	if !found {
		t.Errorf("WorkingDirectory did not read back as %q: %q", odd, texts)
	}
}
