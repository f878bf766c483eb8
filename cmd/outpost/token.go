package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/procguard"
)

// tokenFlagWarning is printed by long-running commands given --token.
var tokenFlagWarning = "warning: --token puts the API token on this process's command line, which every local user can read " +
	"(ps, /proc/PID/cmdline); use --token-file FILE or the " + api.EnvToken.Name + " environment variable instead"

// readTokenFile reads the API token from path, named by from (a flag or a
// variable) in messages. A file other users may read is used, with a
// warning: Kubernetes mounts secrets 0644 by default.
func (f *Factory) readTokenFile(path, from string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the token file %s (%s) does not exist", path, from)
	}
	if err != nil {
		return "", fmt.Errorf("read the token file %s (%s): %w", path, from, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("the token file %s (%s) is empty", path, from)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", fmt.Errorf("the token file %s (%s) holds more than one line; put the token alone in it", path, from)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && !f.tokenFileWarned {
		f.tokenFileWarned = true
		fmt.Fprintf(f.IO.ErrOut, "warning: the token file %s can be read by other users (mode %04o); make it private: chmod 600 %s\n",
			path, fi.Mode().Perm(), path)
	}
	return token, nil
}

// noteTokenFlag, for a command that runs for long, warns when the token
// came with --token, and remembers it for guardedClient.
func (f *Factory) noteTokenFlag(fl *pflag.FlagSet) {
	if fl.Changed("token") && !f.tokenOnArgv {
		f.tokenOnArgv = true
		fmt.Fprintln(f.IO.ErrOut, tokenFlagWarning)
	}
}

// tokenEnv names every variable that may hold the API token or its file.
var tokenEnv = append(api.EnvToken.Names(), api.EnvTokenFile.Name)

// guardedClient is Client for a command that runs for long and starts
// other programs (a worker, an orchestrator). Once the client holds the
// token, the token leaves this process's environment (so nothing it
// starts inherits it, and /proc/PID/environ no longer shows it) and its
// command line, where --token put it.
func (f *Factory) guardedClient() (*client.Client, error) {
	// f.Token may share memory with os.Args, which ScrubArg blanks.
	f.Token = strings.Clone(f.Token)
	c, err := f.Client()
	if err != nil {
		return nil, err
	}
	procguard.ScrubEnv(tokenEnv...)
	if f.tokenOnArgv {
		procguard.ScrubArg(f.Token)
	}
	return c, nil
}
