package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/atomicfile"
)

// config is the saved login: config.json in the user config directory.
type config struct {
	Server string `json:"server"`
	Token  string `json:"token"`
	// CAFile is the CA file the login was checked with (--ca-file or
	// OUTPOST_CA_FILE), trusted for the saved server when neither is
	// given later.
	CAFile string `json:"ca_file,omitempty"`
}

func configPath(f *Factory) (string, error) {
	dir, err := f.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the user config directory: %w", err)
	}
	return filepath.Join(dir, "outpost", "config.json"), nil
}

// loadConfig reads the saved login; a missing file is an empty config.
func loadConfig(f *Factory) (config, error) {
	var cfg config
	path, err := configPath(f)
	if err != nil {
		return cfg, nil // no config directory: nothing saved
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("%s is not valid JSON (fix it or run 'outpost login' again): %w", path, err)
	}
	return cfg, nil
}

// saveConfig writes the login readable by its owner only.
func saveConfig(f *Factory, cfg config) (string, error) {
	path, err := configPath(f)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("save login: %w", err)
	}
	return path, nil
}

// LoginOptions are the settings of `outpost login`: the global --server
// and --token, else OUTPOST_SERVER and OUTPOST_TOKEN.
type LoginOptions struct {
	f *Factory
	// Server is the server to log in to; DefaultServer when none is
	// given.
	Server string
	// Token is the API token to check and save; "" logs in by the device
	// authorization grant: a person approves in the browser.
	Token string
	// NoBrowser keeps a device login from opening a browser.
	NoBrowser bool
}

// NewCmdLogin returns `outpost login`. runF replaces the run in tests.
func NewCmdLogin(f *Factory, runF func(context.Context, *LoginOptions) error) *cobra.Command {
	opts := &LoginOptions{f: f}
	cmd := &cobra.Command{
		Use:   "login --server URL [--token TOKEN]",
		Short: "Save the server URL and token for later commands",
		Long: `Check that the server answers and accepts the API token, then save both to
config.json in the user config directory (mode 0600), so later commands need
neither --server nor --token. A server signed by a private CA needs --ca-file
(or OUTPOST_CA_FILE) here; the CA file's path is saved with the login and
trusted for that server later. When the check fails nothing is saved.

Without a token (no --token, no ` + api.EnvToken.Name + `), login asks the server for a
device login (the OAuth 2.0 device authorization grant): it prints a URL and,
on a line of its own, "code: XXXX-XXXX", opens the URL in a browser where
there is a display (unless --no-browser), and waits, polling every few
seconds. A person signed in to the web UI with a token that may create tokens
checks the code and approves (or a script posts the code to
/v1/auth/device/approve); login then saves the token the server issued, with
the approver's scopes and limits, and exits 0. A denied or expired request
exits 1 and saves nothing.`,
		Example: `  outpost login --server https://outpost.example.com
  outpost login --server http://127.0.0.1:7420 --token "$(cat ~/.local/share/outpost/admin-token)"
  ` + api.EnvToken.Name + `=... outpost login --server https://outpost.example.com`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Server, opts.Token = f.Server, f.Token
			if opts.Server == "" {
				opts.Server = f.Getenv(api.EnvServer.Name)
			}
			if opts.Token == "" {
				opts.Token = f.Getenv(api.EnvToken.Name)
			}
			if opts.Server == "" {
				opts.Server = DefaultServer
			}
			f.Server = opts.Server // for checkServerURL and userMessage
			if err := checkServerURL(f, opts.Server); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runLogin(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.NoBrowser, "no-browser", false, "without a token: print the URL and code, but do not open a browser")
	return cmd
}

func runLogin(ctx context.Context, opts *LoginOptions) error {
	f, server, token := opts.f, opts.Server, opts.Token
	caFile, err := f.TrustedCAFile()
	if err != nil {
		return err
	}
	copts := []client.Option{client.WithUserAgent("outpost-cli/" + version)}
	hc, err := f.HTTPClient()
	if err != nil {
		return err
	}
	if hc != nil {
		copts = append(copts, client.WithHTTPClient(hc))
	}
	if token == "" {
		g, err := deviceLogin(ctx, f, server, hc, deviceAsk{ClientID: api.DeviceClientCLI, NoBrowser: opts.NoBrowser})
		if err != nil {
			return err
		}
		token = g.Token
		fmt.Fprintf(f.IO.ErrOut, "Approved: the server issued token %s.\n", g.TokenID)
	}
	c, err := client.New(server, token, copts...)
	if err != nil {
		return usageError{err}
	}
	if err := checkLogin(ctx, c); err != nil {
		if client.IsUnauthorized(err) && !client.IsNotOutpost(err) {
			return fmt.Errorf("the server at %s refused the token: %s Nothing was saved", server, strings.TrimSpace(err.Error()))
		}
		return errors.New(strings.TrimSuffix(userMessage(f, nil, err), ".") + "; nothing was saved")
	}
	path, err := saveConfig(f, config{Server: server, Token: token, CAFile: caFile})
	if err != nil {
		return err
	}
	if caFile != "" {
		fmt.Fprintf(f.IO.Out, "Saved the login for %s, trusting the CA in %s, to %s.\n", server, caFile, path)
		return nil
	}
	fmt.Fprintf(f.IO.Out, "Saved the login for %s to %s.\n", server, path)
	return nil
}

// checkLogin makes one authenticated call. Every scope may list outposts,
// so a refusal for want of a scope still proves the token valid.
func checkLogin(ctx context.Context, c *client.Client) error {
	if _, err := c.Outposts.List(ctx); err != nil && !client.IsForbidden(err) {
		return err
	}
	return nil
}
