//go:build !unix && !windows

package remote

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/outpost-sh/outpost/api"
)

func init() {
	for _, name := range []string{api.ToolShellStart, api.ToolShellRun, api.ToolShellWrite, api.ToolShellRead, api.ToolShellInterrupt, api.ToolShellKill} {
		tools[name] = runShellUnsupported
	}
}

func runShellUnsupported(context.Context, *callEnv, json.RawMessage) (any, error) {
	return nil, errors.New("persistent shells need a Unix pseudo-terminal; on this system use exec")
}

// shellSet is empty where shells are not supported.
type shellSet struct{}

// closeAll has nothing to close where shells are not supported.
func (*shellSet) closeAll() {}
