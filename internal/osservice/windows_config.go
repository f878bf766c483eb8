// Package osservice describes a worker as a service of its machine's own
// service manager — a Windows service or a launchd job — and, in the files
// built for those systems, talks to that manager. What a service is made
// of (the command line, the recovery actions, the property list) is plain
// data built here on any system, so that Linux tests check it; only the
// calls into the Windows service control manager live in _windows.go files.
package osservice

import (
	"fmt"
	"strings"
	"time"
)

// WindowsService is a Windows service as `outpost worker install` asks
// the service control manager for it: an own-process service started
// automatically (delayed, so the network is up), restarted on failure.
type WindowsService struct {
	// Name is the service's key name, e.g. outpost-worker-gpu-h200.
	Name        string
	DisplayName string
	Description string
	// Executable is the absolute path of outpost.exe.
	Executable string
	// Args follow the executable on the service's command line.
	Args []string
	// Recovery is the delay before each restart after a failure: the
	// first, the second and every later one.
	Recovery []time.Duration
	// ResetPeriod is how long the service must run without failing before
	// its count of failures starts over.
	ResetPeriod time.Duration
	// EventSource is the Event Log source the worker writes to; "" when
	// it logs to a file.
	EventSource string
}

// WindowsServiceName is the service name of the worker for outpost.
func WindowsServiceName(outpost string) string { return "outpost-worker-" + outpost }

// WindowsServiceOptions are what NewWorkerWindowsService builds a service
// from.
type WindowsServiceOptions struct {
	Outpost    string
	Executable string
	// ConfigFile is the worker's settings file, given as --config.
	ConfigFile string
	// TokenFile, DataDir, Dir and LogFile become the flags of the same
	// names; "" leaves a flag out.
	TokenFile, DataDir, Dir, LogFile string
}

// Recovery delays of a worker service: soon after a first failure
// (a server restart), then backing off so that a worker that cannot start
// does not fill the Event Log.
var workerRecovery = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}

// NewWorkerWindowsService is the service that runs `outpost worker start`
// for an outpost.
func NewWorkerWindowsService(o WindowsServiceOptions) WindowsService {
	s := WindowsService{
		Name:        WindowsServiceName(o.Outpost),
		DisplayName: "Outpost worker (" + o.Outpost + ")",
		Description: "Serves the sessions of the outpost " + o.Outpost + " on this machine (outpost worker start). Installed by 'outpost worker install'; 'outpost worker uninstall --outpost " + o.Outpost + "' removes it.",
		Executable:  o.Executable,
		Args:        []string{"worker", "start", "--outpost", o.Outpost, "--config", o.ConfigFile},
		Recovery:    workerRecovery,
		ResetPeriod: 24 * time.Hour,
	}
	for _, f := range []struct{ flag, v string }{{"--token-file", o.TokenFile}, {"--data-dir", o.DataDir}, {"--dir", o.Dir}, {"--log-file", o.LogFile}} {
		if f.v != "" {
			s.Args = append(s.Args, f.flag, f.v)
		}
	}
	if o.LogFile == "" {
		s.EventSource = s.Name
	}
	return s
}

// CommandLine is the service's command line as the service control
// manager stores it, each word quoted as CommandLineToArgvW reads it back.
func (s WindowsService) CommandLine() string {
	words := []string{EscapeWindowsArg(s.Executable)}
	for _, a := range s.Args {
		words = append(words, EscapeWindowsArg(a))
	}
	return strings.Join(words, " ")
}

// Describe is the service's settings as lines a person reads: what a dry
// run prints and what the tests hold as golden output.
func (s WindowsService) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Name:         %s\n", s.Name)
	fmt.Fprintf(&b, "Display name: %s\n", s.DisplayName)
	fmt.Fprintf(&b, "Description:  %s\n", s.Description)
	fmt.Fprintf(&b, "Command line: %s\n", s.CommandLine())
	b.WriteString("Start type:   automatic (delayed start)\n")
	b.WriteString("Account:      LocalSystem\n")
	var acts []string
	for _, d := range s.Recovery {
		acts = append(acts, "restart after "+durationText(d))
	}
	fmt.Fprintf(&b, "On failure:   %s (the last repeats); a stop with an error counts as a failure; the count starts over after %s without one\n",
		strings.Join(acts, ", "), durationText(s.ResetPeriod))
	if s.EventSource != "" {
		fmt.Fprintf(&b, "Logs:         the Application event log, source %s\n", s.EventSource)
	} else {
		b.WriteString("Logs:         the file of --log-file\n")
	}
	return b.String()
}

// EscapeWindowsArg quotes s as one word of a Windows command line, as
// CommandLineToArgvW (and Go's os.Args on Windows) reads it back: quotes
// around a word with spaces or tabs, a backslash before each quote, and
// backslashes doubled only where a quote follows them. It is
// syscall.EscapeArg's rule, here so that Linux builds and tests use it.
func EscapeWindowsArg(s string) string {
	if s == "" {
		return `""`
	}
	hasSpace := strings.ContainsAny(s, " \t")
	if !strings.ContainsAny(s, `"\`) {
		if hasSpace {
			return `"` + s + `"`
		}
		return s
	}
	var b strings.Builder
	if hasSpace {
		b.WriteByte('"')
	}
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			slashes++
		case '"':
			b.WriteString(strings.Repeat(`\`, slashes+1))
			slashes = 0
		default:
			slashes = 0
		}
		b.WriteByte(c)
	}
	if hasSpace {
		b.WriteString(strings.Repeat(`\`, slashes))
		b.WriteByte('"')
	}
	return b.String()
}

// WindowsServiceNameFromArgs finds the service name a worker's command
// line belongs to (its --outpost), for the Event Log source of a worker
// running as a service; "" when the arguments name no outpost.
func WindowsServiceNameFromArgs(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--outpost="); ok && v != "" {
			return WindowsServiceName(v)
		}
		if a == "--outpost" && i+1 < len(args) && args[i+1] != "" {
			return WindowsServiceName(args[i+1])
		}
	}
	return ""
}

// LogFileGiven reports whether a worker's command line sends its log to a
// file (--log-file), not to the Event Log.
func LogFileGiven(args []string) bool {
	for _, a := range args {
		if a == "--log-file" || strings.HasPrefix(a, "--log-file=") {
			return true
		}
	}
	return false
}

// durationText writes d in its largest whole unit: 5 s, 2 min, 24 h.
func durationText(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
