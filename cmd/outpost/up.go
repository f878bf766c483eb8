package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/worker"
)

// UpOptions are the settings of `outpost up`.
type UpOptions struct {
	f         *Factory
	Dir       string
	Listen    string
	NoDemo    bool
	LogLevel  string
	LogFormat string
}

// NewCmdUp returns `outpost up`: the whole system on one machine. runF
// replaces the run in tests.
func NewCmdUp(f *Factory, runF func(context.Context, *UpOptions) error) *cobra.Command {
	opts := &UpOptions{f: f}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole system locally: server, outpost 'local', one worker and a demo session",
		Long: `Run Outpost on this machine with embedded defaults: a server (SQLite under
--dir), an outpost named 'local', one worker serving it with its workspace
in <dir>/worker, and a demo script session that clones a small git
repository made on the fly, runs a command, edits a file and shows the
diff. It prints the session live, then the URLs and the admin token, and
serves until Ctrl-C. Logs go to <dir>/outpost.log.`,
		Example: `  outpost up
  outpost up --listen 127.0.0.1:8080 --dir /tmp/outpost-demo
  outpost up --no-demo
  outpost up --log-format json   # outpost.log as JSON lines`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if v := envListen.Get(f.Getenv); !cmd.Flags().Changed("listen") && v != "" {
				opts.Listen = v
			}
			if err := resolveLog(cmd.Flags(), f.Getenv, &opts.LogLevel, &opts.LogFormat); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runUp(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Dir, "dir", ".outpost", "directory for the server's data, the worker and the demo")
	fl.StringVar(&opts.Listen, "listen", "127.0.0.1:7420", "address the server listens on (env "+envListen.Name+")")
	fl.BoolVar(&opts.NoDemo, "no-demo", false, "do not run the demo session")
	addLogFlags(fl, &opts.LogLevel, &opts.LogFormat)
	return cmd
}

func runUp(ctx context.Context, o *UpOptions) error {
	f := o.f
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	logPath := filepath.Join(dir, "outpost.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	defer logFile.Close()
	logger := newLogger(logFile, o.LogLevel, o.LogFormat)
	out := f.IO.Out

	dataDir := filepath.Join(dir, "server")
	srv, err := server.New(ctx, server.Options{Listen: o.Listen, DataDir: dataDir, Logger: logger.With("component", "server"), Stdout: logFile})
	if err != nil {
		return err
	}
	admin := srv.AdminToken()
	if admin == "" {
		raw, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
		if err != nil {
			return fmt.Errorf("this data dir was made with a different admin token; read it from %s or remove %s: %w", filepath.Join(dataDir, "admin-token"), dir, err)
		}
		admin = strings.TrimSpace(string(raw))
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(gctx) })
	fmt.Fprintf(out, "Outpost server on %s (data in %s, logs in %s)\n", srv.URL(), dataDir, logPath)

	adminClient, err := client.New(srv.URL(), admin, client.WithUserAgent("outpost-up/"+version))
	if err != nil {
		return err
	}
	machineToken, err := upOutpost(gctx, adminClient, srv.URL(), filepath.Join(dir, "worker-token"))
	if err != nil {
		_ = g.Wait()
		return err
	}
	machineClient, err := client.New(srv.URL(), machineToken, client.WithUserAgent("outpost-up/"+version))
	if err != nil {
		return err
	}
	workDir := filepath.Join(dir, "worker")
	g.Go(func() error {
		err := worker.Run(gctx, worker.Options{
			Client:  machineClient,
			Outpost: "local",
			Dir:     workDir,
			DataDir: filepath.Join(dir, "worker-data"),
			Logger:  logger.With("component", "worker"),
			Stdout:  logFile,
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("worker: %w", err)
		}
		return nil
	})
	fmt.Fprintf(out, "Outpost 'local' with one worker; its workspace is %s\n\n", workDir)

	if !o.NoDemo {
		if err := upDemo(gctx, f, adminClient, dir); err != nil && gctx.Err() == nil {
			fmt.Fprintf(f.IO.ErrOut, "The demo session failed: %v\n", err)
		}
	}
	if gctx.Err() == nil {
		fmt.Fprintf(out, `
Outpost is running.
  Web UI             %[1]s/   (sign in with the admin token)
  API and fleet API  %[1]s/v1/   (fleet: %[1]s/opbeta/outposts/)
  Gateway            %[2]s
  Metrics            %[1]s/metrics
  Admin token        %[3]s   (also in %[4]s)

Try:
  outpost login --server %[1]s --token %[3]s
  outpost sessions list
  outpost sessions create --outpost local --file session.yaml --follow

Press Ctrl-C to stop.
`, srv.URL(), strings.Replace(srv.URL(), "http", "ws", 1)+api.GatewayPath, admin, filepath.Join(dataDir, "admin-token"))
	}
	err = g.Wait()
	fmt.Fprintln(out, "Outpost stopped.")
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// upOutpost makes sure outpost 'local' exists and returns a machine token
// limited to it: the one kept in tokenFile by an earlier start while the
// server still takes it for that outpost and for more than a day, else a
// new one (30 days), kept there for the next start — so that starting
// again does not leave another token behind each time.
func upOutpost(ctx context.Context, c *client.Client, serverURL, tokenFile string) (string, error) {
	_, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "local", Platform: worker.HostPlatform(), Description: "This machine (outpost up)"})
	if err != nil && !client.IsConflict(err) {
		return "", fmt.Errorf("create outpost local: %w", err)
	}
	if b, err := os.ReadFile(tokenFile); err == nil {
		secret := strings.TrimSpace(string(b))
		if kept, err := client.New(serverURL, secret, client.WithUserAgent("outpost-up/"+version)); err == nil {
			me, err := kept.Tokens.WhoAmI(ctx)
			// Only a machine token of outpost local is this command's: any
			// other token found in the file (put there by hand) is neither
			// used for the worker nor revoked.
			ours := err == nil && me.Outpost == "local" && api.HasScope(me.Scopes, api.ScopeMachine)
			if ours && (me.ExpiresAt == nil || time.Unix(*me.ExpiresAt, 0).After(time.Now().Add(24*time.Hour))) {
				return secret, nil
			}
			if ours { // about to expire: replace it
				_ = c.Tokens.Revoke(ctx, me.ID)
			}
		}
	}
	tok, err := c.Tokens.Create(ctx, api.CreateTokenRequest{Name: "outpost-up worker", Scopes: []string{api.ScopeMachine}, Outpost: "local", ExpiresInS: int64((30 * 24 * time.Hour).Seconds())})
	if err != nil {
		return "", fmt.Errorf("create the worker's token: %w", err)
	}
	if err := atomicfile.Write(tokenFile, []byte(tok.Secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep the worker's token: %w", err)
	}
	return tok.Secret, nil
}

// upDemo runs the demo session and prints it live.
func upDemo(ctx context.Context, f *Factory, c *client.Client, dir string) error {
	repo, err := demo.MakeRepo(ctx, filepath.Join(dir, "demo"))
	if err != nil {
		return err
	}
	s, err := c.Sessions.Create(ctx, demo.Session("local", repo))
	if err != nil {
		return fmt.Errorf("create the demo session: %w", err)
	}
	fmt.Fprintf(f.IO.Out, "Demo session %s: clone %s, run its tests, edit README.md, show the diff\n", s.Metadata.SessionID, repo)
	printer := newTranscriptPrinter(f.IO.Out, time.Local)
	var end *api.Event
	err = c.Sessions.Follow(ctx, s.Metadata.SessionID, 0, func(ev api.Event) error {
		if ev.Type == api.EventEnd {
			end = &ev
		}
		return printer.Print(ev)
	})
	if err != nil {
		return err
	}
	if end != nil && end.Status != api.StatusExit {
		return fmt.Errorf("the demo session ended %s: %s", end.Status, end.Reason)
	}
	fmt.Fprintf(f.IO.Out, "Demo session finished. Its transcript: outpost sessions logs %s\n", s.Metadata.SessionID)
	return nil
}
