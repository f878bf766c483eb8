//go:build windows

package osservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/eventlog"
	"golang.org/x/sys/windows/svc/mgr"
)

// IsWindowsService reports whether the service control manager started
// this process.
func IsWindowsService() bool {
	ok, err := svc.IsWindowsService()
	return err == nil && ok
}

// IsAdmin reports whether this process runs elevated, as creating a
// service needs.
func IsAdmin() bool {
	return windows.GetCurrentProcessToken().IsElevated()
}

// RunWindowsService runs run under the service control manager until it
// returns, and returns its exit code. Stop and Shutdown cancel run's
// context: the worker's graceful stop, as SIGTERM is elsewhere. While run
// winds down the service reports StopPending with a rising checkpoint so
// that the manager waits for the grace period rather than killing it.
func RunWindowsService(name string, run func(ctx context.Context) int) (int, error) {
	h := &serviceHandler{run: run}
	if err := svc.Run(name, h); err != nil {
		return 1, fmt.Errorf("run as the service %s: %w", name, err)
	}
	return h.code, nil
}

type serviceHandler struct {
	run  func(ctx context.Context) int
	code int
}

// Execute is the service's life: svc.Run calls it once.
func (h *serviceHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	const accepts = svc.AcceptStop | svc.AcceptShutdown
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- h.run(ctx) }()
	status <- svc.Status{State: svc.Running, Accepts: accepts}
	var tick <-chan time.Time
	var checkpoint uint32
	stopping := false
	for {
		select {
		case code := <-done:
			h.code = code
			if code != 0 && !stopping {
				// An exit nobody asked for is a failure: the manager's
				// recovery actions restart the worker.
				return true, uint32(code)
			}
			return false, 0
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				if !stopping {
					stopping = true
					cancel()
					t := time.NewTicker(5 * time.Second)
					defer t.Stop()
					tick = t.C
				}
				checkpoint++
				status <- svc.Status{State: svc.StopPending, CheckPoint: checkpoint, WaitHint: 10_000}
			}
		case <-tick:
			checkpoint++
			status <- svc.Status{State: svc.StopPending, CheckPoint: checkpoint, WaitHint: 10_000}
		}
	}
}

// InstallWindowsService creates the service s, or updates the one of its
// name, with its recovery actions and its Event Log source. undo puts
// back what was there before (no service, or the old settings).
func InstallWindowsService(s WindowsService) (undo func() error, err error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, fmt.Errorf("connect to the service control manager: %w", err)
	}
	defer m.Disconnect()
	cfg := mgr.Config{
		StartType: mgr.StartAutomatic, DelayedAutoStart: true, ErrorControl: mgr.ErrorNormal,
		DisplayName: s.DisplayName, Description: s.Description,
	}
	var undos []func() error
	undoAll := func() error {
		var errs []error
		for i := len(undos) - 1; i >= 0; i-- {
			errs = append(errs, undos[i]())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			if uerr := undoAll(); uerr != nil {
				err = fmt.Errorf("%w; taking it back failed too: %v", err, uerr)
			}
			undo = nil
		}
	}()

	ws, oerr := m.OpenService(s.Name)
	if oerr == nil {
		old, err := ws.Config()
		if err != nil {
			ws.Close()
			return nil, fmt.Errorf("read the service %s: %w", s.Name, err)
		}
		oldActs, _ := ws.RecoveryActions()
		oldReset, _ := ws.ResetPeriod()
		cfg.ServiceType, cfg.ServiceStartName, cfg.BinaryPathName = old.ServiceType, old.ServiceStartName, s.CommandLine()
		if err := ws.UpdateConfig(cfg); err != nil {
			ws.Close()
			return nil, fmt.Errorf("update the service %s: %w", s.Name, err)
		}
		name := s.Name
		undos = append(undos, func() error {
			m, err := mgr.Connect()
			if err != nil {
				return err
			}
			defer m.Disconnect()
			ws, err := m.OpenService(name)
			if err != nil {
				return err
			}
			defer ws.Close()
			if len(oldActs) > 0 {
				_ = ws.SetRecoveryActions(oldActs, oldReset)
			}
			return ws.UpdateConfig(old)
		})
	} else {
		ws, err = m.CreateService(s.Name, s.Executable, cfg, s.Args...)
		if err != nil {
			return nil, fmt.Errorf("create the service %s: %w", s.Name, err)
		}
		name := s.Name
		undos = append(undos, func() error { return deleteService(name) })
	}
	defer ws.Close()
	var acts []mgr.RecoveryAction
	for _, d := range s.Recovery {
		acts = append(acts, mgr.RecoveryAction{Type: mgr.ServiceRestart, Delay: d})
	}
	if err := ws.SetRecoveryActions(acts, uint32(s.ResetPeriod/time.Second)); err != nil {
		return nil, fmt.Errorf("set the recovery actions of %s: %w", s.Name, err)
	}
	// A worker that stops with an error (it cannot reach the server, say)
	// has not crashed; without this the manager would not restart it.
	if err := ws.SetRecoveryActionsOnNonCrashFailures(true); err != nil {
		return nil, fmt.Errorf("set the recovery of %s on errors: %w", s.Name, err)
	}
	if s.EventSource != "" {
		err := eventlog.InstallAsEventCreate(s.EventSource, eventlog.Error|eventlog.Warning|eventlog.Info)
		switch {
		case err == nil:
			src := s.EventSource
			undos = append(undos, func() error { return eventlog.Remove(src) })
		case strings.Contains(err.Error(), "exists"):
			// Installed before: keep it.
		default:
			return nil, fmt.Errorf("register the Event Log source %s: %w", s.EventSource, err)
		}
	}
	return undoAll, nil
}

// deleteService stops and deletes the named service.
func deleteService(name string) error {
	m, err := mgr.Connect()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		return err
	}
	defer ws.Close()
	_, _ = ws.Control(svc.Stop)
	return ws.Delete()
}

// serviceWait bounds the waits for a service to start or stop; a stop
// waits for the worker's grace period.
const (
	serviceStartWait = 30 * time.Second
	serviceStopWait  = 3 * time.Minute
)

// RestartWindowsService stops the named service if it runs, starts it and
// waits until it runs. undo stops it again when it was not running before.
func RestartWindowsService(ctx context.Context, name string) (undo func() error, err error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, fmt.Errorf("connect to the service control manager: %w", err)
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		return nil, fmt.Errorf("open the service %s: %w", name, err)
	}
	defer ws.Close()
	st, err := ws.Query()
	if err != nil {
		return nil, fmt.Errorf("query the service %s: %w", name, err)
	}
	wasRunning := st.State != svc.Stopped
	if wasRunning {
		if err := stopAndWait(ctx, ws); err != nil {
			return nil, fmt.Errorf("stop the service %s: %w", name, err)
		}
	}
	undo = func() error {
		if wasRunning {
			return startByName(name) // the old settings are back by now
		}
		return StopWindowsService(context.Background(), name)
	}
	if err := ws.Start(); err != nil {
		return undo, fmt.Errorf("start the service %s: %w", name, err)
	}
	deadline := time.Now().Add(serviceStartWait)
	for {
		st, err := ws.Query()
		if err != nil {
			return undo, fmt.Errorf("query the service %s: %w", name, err)
		}
		switch st.State {
		case svc.Running:
			return undo, nil
		case svc.Stopped:
			return undo, fmt.Errorf("the service %s stopped right after it started (exit code %d; see its log)", name, st.ServiceSpecificExitCode)
		}
		if time.Now().After(deadline) {
			return undo, fmt.Errorf("the service %s did not start within %s", name, serviceStartWait)
		}
		select {
		case <-ctx.Done():
			return undo, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func startByName(name string) error {
	m, err := mgr.Connect()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		return err
	}
	defer ws.Close()
	return ws.Start()
}

// StopWindowsService stops the named service and waits until it has
// stopped; a service that is not installed is no error.
func StopWindowsService(ctx context.Context, name string) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service control manager: %w", err)
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		return nil
	}
	defer ws.Close()
	return stopAndWait(ctx, ws)
}

func stopAndWait(ctx context.Context, ws *mgr.Service) error {
	st, err := ws.Query()
	if err != nil {
		return err
	}
	if st.State == svc.Stopped {
		return nil
	}
	if st.State != svc.StopPending {
		if _, err := ws.Control(svc.Stop); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(serviceStopWait)
	for {
		st, err := ws.Query()
		if err != nil {
			return err
		}
		if st.State == svc.Stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still stopping after %s", serviceStopWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// RemoveWindowsService stops and deletes the named service and its Event
// Log source; reports false when there was no such service.
func RemoveWindowsService(ctx context.Context, name string) (bool, error) {
	m, err := mgr.Connect()
	if err != nil {
		return false, fmt.Errorf("connect to the service control manager: %w", err)
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		return false, nil
	}
	defer ws.Close()
	if err := stopAndWait(ctx, ws); err != nil {
		return true, fmt.Errorf("stop the service %s: %w", name, err)
	}
	if err := ws.Delete(); err != nil {
		return true, fmt.Errorf("delete the service %s: %w", name, err)
	}
	_ = eventlog.Remove(name) // absent when the worker logged to a file
	return true, nil
}

// WindowsServiceState says whether the named service is installed and its
// state: "not installed", "running", "stopped", "starting", "stopping".
func WindowsServiceState(name string) (string, error) {
	m, err := mgr.Connect()
	if err != nil {
		return "", fmt.Errorf("connect to the service control manager: %w", err)
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		return "not installed", nil
	}
	defer ws.Close()
	st, err := ws.Query()
	if err != nil {
		return "", err
	}
	switch st.State {
	case svc.Running:
		return "running", nil
	case svc.Stopped:
		return "stopped", nil
	case svc.StartPending:
		return "starting", nil
	case svc.StopPending:
		return "stopping", nil
	}
	return fmt.Sprintf("state %d", st.State), nil
}

// secretFileDACL lets only LocalSystem and the Administrators group read
// or write a file, and stops it inheriting ProgramData's grant of read to
// every user.
const secretFileDACL = "D:P(A;;FA;;;SY)(A;;FA;;;BA)"

// WriteSecretFile writes data to path readable by LocalSystem and the
// administrators only. The access list is set on the empty file before the
// secret goes in.
func WriteSecretFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	sd, err := windows.SecurityDescriptorFromString(secretFileDACL)
	if err != nil {
		return err
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil); err != nil {
		return fmt.Errorf("restrict %s to the administrators: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Close()
}

// OpenEventLog returns a writer whose every Write (one log record, as
// log/slog writes them) becomes an Application event log entry of source,
// at the record's level.
func OpenEventLog(source string) (io.WriteCloser, error) {
	l, err := eventlog.Open(source)
	if err != nil {
		return nil, fmt.Errorf("open the event log source %s: %w", source, err)
	}
	return eventLogWriter{l}, nil
}

type eventLogWriter struct{ l *eventlog.Log }

// eventID is the one event id the worker's entries use (EventCreate's
// message file takes ids 1 to 1000).
const eventID = 1

func (w eventLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\r\n")
	var err error
	switch RecordLevel(msg) {
	case LevelError:
		err = w.l.Error(eventID, msg)
	case LevelWarn:
		err = w.l.Warning(eventID, msg)
	default:
		err = w.l.Info(eventID, msg)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w eventLogWriter) Close() error { return w.l.Close() }
