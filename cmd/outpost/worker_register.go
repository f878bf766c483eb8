package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/atomicfile"
)

// machineTokenFile is the file in a worker's data dir that keeps the
// machine token it received by approval.
const machineTokenFile = "machine-token.json"

// machineToken is machineTokenFile's content: the token, and the server
// and outpost it was issued for, so that a data dir moved to another
// server or outpost is not used with the wrong token.
type machineToken struct {
	Server  string `json:"server"`
	Outpost string `json:"outpost"`
	TokenID string `json:"token_id,omitempty"`
	Token   string `json:"token"`
}

// registerByApproval gives a worker that has no token one: the machine
// token it saved in its data dir on an earlier start, else one a person
// approves now (the device authorization grant, asking for the
// outposts.machine scope limited to the worker's outpost), which it saves
// there (mode 0600) for the next start. A worker given a token, or with a
// saved login, does nothing here.
func (o *WorkerStartOptions) registerByApproval(ctx context.Context, log *slog.Logger) error {
	f := o.f
	server, token, err := f.Endpoint()
	if err != nil || token != "" {
		return err
	}
	if o.Outpost == "" {
		return usageErrorf("worker start needs --outpost")
	}
	if err := checkServerURL(f, server); err != nil {
		return err
	}
	path := filepath.Join(o.DataDir, machineTokenFile)
	saved, err := readMachineToken(path)
	switch {
	case err == nil:
		if strings.TrimSuffix(saved.Server, "/") != strings.TrimSuffix(server, "/") || saved.Outpost != o.Outpost {
			return fmt.Errorf("%s holds a token for outpost %s on %s, not for outpost %s on %s; remove it to register this worker again",
				path, saved.Outpost, saved.Server, o.Outpost, server)
		}
		log.Info("using the machine token saved at registration", "file", path, "token", saved.TokenID)
		f.Token = saved.Token
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	hc, err := f.HTTPClient()
	if err != nil {
		return err
	}
	fmt.Fprintf(f.IO.ErrOut, "This worker has no token: asking %s for a machine token for outpost %s.\n", server, o.Outpost)
	g, err := deviceLogin(ctx, f, server, hc, deviceAsk{ClientID: api.DeviceClientWorker, Scopes: []string{api.ScopeMachine}, Outpost: o.Outpost, NoBrowser: true})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("create the worker data dir: %w", err)
	}
	b, err := json.MarshalIndent(machineToken{Server: server, Outpost: o.Outpost, TokenID: g.TokenID, Token: g.Token}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save the machine token: %w", err)
	}
	log.Info("registered: approved, machine token saved", "file", path, "token", g.TokenID, "outpost", o.Outpost)
	f.Token = g.Token
	return nil
}

// readMachineToken reads a saved machine token, refusing one other users
// may read: whoever reads it can serve the outpost's sessions.
func readMachineToken(path string) (machineToken, error) {
	var mt machineToken
	fi, err := os.Stat(path)
	if err != nil {
		return mt, err
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return mt, fmt.Errorf("the machine token file %s can be read by other users (mode %04o), so it is not used: make it private (chmod 600 %s) or remove it to register again",
			path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return mt, fmt.Errorf("read the machine token: %w", err)
	}
	if err := json.Unmarshal(b, &mt); err != nil || mt.Token == "" {
		return mt, fmt.Errorf("%s is not a saved machine token; remove it to register this worker again", path)
	}
	return mt, nil
}
