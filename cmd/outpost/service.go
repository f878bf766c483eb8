package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/outpost-sh/outpost/internal/osservice"
)

// runAsService runs the command line under the Windows service control
// manager when the manager started this process (`outpost worker
// install` made it a service); ok is false otherwise, and on every other
// system. Stop and Shutdown cancel the command's context, the graceful
// stop SIGTERM gives elsewhere. A service has no console: the log goes to
// the Application event log under the service's name unless the command
// line has --log-file.
func runAsService(args []string) (code int, ok bool) {
	if !osservice.IsWindowsService() {
		return 0, false
	}
	f := NewSystemFactory()
	f.IO.In, f.IO.Out = strings.NewReader(""), io.Discard
	name := osservice.WindowsServiceNameFromArgs(args)
	if !osservice.LogFileGiven(args) && name != "" {
		if w, err := osservice.OpenEventLog(name); err == nil {
			defer w.Close()
			f.IO.ErrOut = w
		}
	}
	code, err := osservice.RunWindowsService(name, func(ctx context.Context) int { return Main(ctx, args, f) })
	if err != nil {
		fmt.Fprintln(f.IO.ErrOut, err)
	}
	return code, true
}
