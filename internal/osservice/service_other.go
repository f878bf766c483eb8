//go:build !windows

package osservice

import (
	"context"
	"errors"
	"io"
)

// errNotWindows answers every Windows service call elsewhere.
var errNotWindows = errors.New("only Windows has a service control manager")

// IsWindowsService is false: only Windows has a service control manager.
func IsWindowsService() bool { return false }

// IsAdmin is false: administrator rights are a Windows notion.
func IsAdmin() bool { return false }

// RunWindowsService fails: only Windows has a service control manager.
func RunWindowsService(string, func(context.Context) int) (int, error) { return 1, errNotWindows }

// InstallWindowsService fails: only Windows has a service control manager.
func InstallWindowsService(WindowsService) (func() error, error) { return nil, errNotWindows }

// RestartWindowsService fails: only Windows has a service control manager.
func RestartWindowsService(context.Context, string) (func() error, error) { return nil, errNotWindows }

// StopWindowsService fails: only Windows has a service control manager.
func StopWindowsService(context.Context, string) error { return errNotWindows }

// RemoveWindowsService fails: only Windows has a service control manager.
func RemoveWindowsService(context.Context, string) (bool, error) { return false, errNotWindows }

// WindowsServiceState fails: only Windows has a service control manager.
func WindowsServiceState(string) (string, error) { return "", errNotWindows }

// WriteSecretFile fails: its access list is a Windows one.
func WriteSecretFile(string, []byte) error { return errNotWindows }

// OpenEventLog fails: only Windows has the Event Log.
func OpenEventLog(string) (io.WriteCloser, error) { return nil, errNotWindows }
