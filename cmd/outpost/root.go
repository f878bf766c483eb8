package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// Exit codes of the outpost command.
const (
	exitOK = 0
	// exitFailed: the session a command followed failed (docs/cli.md).
	exitFailed = 1
	exitUsage  = 2
	// exitError: any other failure, such as an unreachable server.
	exitError = 3
	// exitRejected: `remote serve` was refused by the gateway.
	exitRejected = api.RemoteExitRejected
)

// DefaultServer is the server URL used when none is configured.
const DefaultServer = "http://127.0.0.1:7420"

// Output formats of -o/--output.
const (
	outputHuman = "human"
	outputJSON  = "json"
)

// IOStreams are the standard streams a command reads and writes.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Factory carries what every command needs: its streams, its environment,
// and the global flags, from which it builds API clients.
type Factory struct {
	IO IOStreams
	// Getenv reads the environment; tests replace it.
	Getenv func(string) string
	// UserConfigDir returns the directory config.json lives under (in its
	// "outpost" subdirectory).
	UserConfigDir func() (string, error)
	// UserHomeDir returns the home directory for default data dirs.
	UserHomeDir func() (string, error)
	// Getwd returns the current directory.
	Getwd func() (string, error)

	// Global flags, set by the root command.
	Server    string
	Token     string
	TokenFile string
	Output    string
	// CAFile is the PEM file of CA certificates trusted besides the
	// system's (--ca-file); see TrustedCAFile.
	CAFile string

	// tokenFileWarned keeps the warning about a token file others can
	// read to one per process.
	tokenFileWarned bool
	// tokenOnArgv is set by noteTokenFlag when --token gave the token.
	tokenOnArgv bool
}

// NewSystemFactory returns a Factory of the real process: os streams and
// environment.
func NewSystemFactory() *Factory {
	return &Factory{
		IO:            IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
		Getenv:        os.Getenv,
		UserConfigDir: os.UserConfigDir,
		UserHomeDir:   os.UserHomeDir,
		Getwd:         os.Getwd,
	}
}

// Endpoint returns the server URL and token to use: each from its flag,
// else the environment (OUTPOST_SERVER; OUTPOST_TOKEN, then the file
// OUTPOST_TOKEN_FILE names), else the saved login, the server falling back
// to DefaultServer. --token-file counts as the token's flag.
func (f *Factory) Endpoint() (server, token string, err error) {
	server, token = f.Server, f.Token
	if token == "" && f.TokenFile != "" {
		if token, err = f.readTokenFile(f.TokenFile, "--token-file"); err != nil {
			return "", "", err
		}
	}
	if server == "" {
		server = f.Getenv(api.EnvServer.Name)
	}
	if token == "" {
		token = f.Getenv(api.EnvToken.Name)
	}
	if path := f.Getenv(api.EnvTokenFile.Name); token == "" && path != "" {
		if token, err = f.readTokenFile(path, api.EnvTokenFile.Name); err != nil {
			return "", "", err
		}
	}
	if server == "" || token == "" {
		cfg, err := loadConfig(f)
		if err != nil {
			return "", "", err
		}
		// A saved token belongs to the saved server only.
		if server == "" || strings.TrimSuffix(server, "/") == strings.TrimSuffix(cfg.Server, "/") {
			if server == "" {
				server = cfg.Server
			}
			if token == "" {
				token = cfg.Token
			}
		}
	}
	if server == "" {
		server = DefaultServer
	}
	return server, token, nil
}

// TrustedCAFile returns the absolute path of the CA file to trust besides
// the system's roots: --ca-file, else OUTPOST_CA_FILE, else the CA file
// saved with the login when the server in use is the saved one, else "".
func (f *Factory) TrustedCAFile() (string, error) {
	ca := f.CAFile
	if ca == "" {
		ca = envCAFile.Get(f.Getenv)
	}
	if ca == "" {
		// An unreadable saved login is reported by the commands that need
		// it (Endpoint); here it only means no saved CA.
		cfg, _ := loadConfig(f)
		server := f.Server
		if server == "" {
			server = f.Getenv(api.EnvServer.Name)
		}
		if cfg.CAFile != "" && (server == "" || strings.TrimSuffix(server, "/") == strings.TrimSuffix(cfg.Server, "/")) {
			ca = cfg.CAFile
		}
	}
	if ca == "" {
		return "", nil
	}
	abs, err := filepath.Abs(ca)
	if err != nil {
		return "", fmt.Errorf("CA file %s: %w", ca, err)
	}
	return abs, nil
}

// HTTPClient returns the HTTP client of API calls: one trusting the CA
// file's certificates too when there is one, else nil (the default).
func (f *Factory) HTTPClient() (*http.Client, error) {
	ca, err := f.TrustedCAFile()
	if err != nil || ca == "" {
		return nil, err
	}
	tr, err := tlsconfig.Transport(ca)
	if err != nil {
		if f.CAFile == "" && envCAFile.Get(f.Getenv) == "" {
			return nil, fmt.Errorf("%w (saved with the login: log in again with --ca-file, or give --ca-file or %s)", err, envCAFile.Name)
		}
		return nil, fmt.Errorf("%w (given by --ca-file or %s)", err, envCAFile.Name)
	}
	return &http.Client{Transport: tr}, nil
}

// Client returns an API client for the configured server and token.
func (f *Factory) Client() (*client.Client, error) {
	server, token, err := f.Endpoint()
	if err != nil {
		return nil, err
	}
	if err := checkServerURL(f, server); err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithUserAgent("outpost-cli/" + version)}
	hc, err := f.HTTPClient()
	if err != nil {
		return nil, err
	}
	if hc != nil {
		opts = append(opts, client.WithHTTPClient(hc))
	}
	return client.New(server, token, opts...)
}

// JSON reports whether -o json was asked for.
func (f *Factory) JSON() bool { return f.Output == outputJSON }

// NewCmdRoot returns the outpost command with every subcommand.
func NewCmdRoot(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outpost",
		Short: "Run AI-agent sessions on machines you control",
		Long: `Outpost runs AI-agent sessions on machines you control. A server keeps named
queues of sessions ("outposts"); workers on your machines claim sessions and
run their tool calls locally.`,
		Example: `  outpost server
  outpost login --server http://127.0.0.1:7420 --token $ADMIN_TOKEN
  outpost worker start --outpost dev
  outpost sessions create --outpost dev --file session.yaml --follow`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if f.Output != outputHuman && f.Output != outputJSON {
				return usageErrorf("--output must be %q or %q, not %q", outputHuman, outputJSON, f.Output)
			}
			if cmd.Flags().Changed("token") && cmd.Flags().Changed("token-file") {
				return usageErrorf("give --token or --token-file, not both")
			}
			return nil
		},
	}
	addGlobalFlags(cmd, f)

	cmd.AddCommand(
		NewCmdVersion(f, nil),
		NewCmdServer(f, nil),
		NewCmdRemote(f),
		NewCmdWorker(f, nil),
		NewCmdDoctor(f, nil),
		NewCmdOrchestrate(f, nil),
		NewCmdOperator(f, nil),
		NewCmdOutposts(f),
		NewCmdWorkers(f),
		NewCmdSessions(f),
		NewCmdTokens(f),
		NewCmdSecrets(f),
		NewCmdAudit(f),
		NewCmdWebhooks(f),
		NewCmdUsers(f),
		NewCmdRoles(f),
		NewCmdLogin(f, nil),
		NewCmdCerts(f, nil),
		NewCmdUp(f, nil),
		NewCmdMCP(f, nil),
		NewCmdBench(f),
	)
	return cmd
}

// addGlobalFlags gives cmd the global flags, stored in f, and makes its flag
// errors usage errors.
func addGlobalFlags(cmd *cobra.Command, f *Factory) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.Server, "server", "", "Outpost server URL (env "+api.EnvServer.Name+", then the saved login; default "+DefaultServer+")")
	pf.StringVar(&f.Token, "token", "", "API token (env "+api.EnvToken.Name+", then the saved login); other local users can read a command line, so prefer --token-file or the environment")
	pf.StringVar(&f.TokenFile, "token-file", "", "file holding the API token, readable by its owner only (env "+api.EnvTokenFile.Name+")")
	pf.StringVar(&f.CAFile, "ca-file", "", "PEM file of CA certificates to trust besides the system's, for an https:// server (env "+envCAFile.Name+"); workers and orchestrators pass it on to their remotes")
	pf.StringVarP(&f.Output, "output", "o", outputHuman, "output format: human or json")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
}

// Main runs the outpost command with args and returns the exit code. Errors
// are written to f.IO.ErrOut as one sentence.
func Main(ctx context.Context, args []string, f *Factory) int {
	cmd := NewCmdRoot(f)
	cmd.SetArgs(args)
	cmd.SetIn(f.IO.In)
	cmd.SetOut(f.IO.Out)
	cmd.SetErr(f.IO.ErrOut)
	c, err := cmd.ExecuteContextC(ctx)
	if err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return exitOK
	}
	var pe programExit
	if errors.As(err, &pe) {
		return pe.code // the program said why itself
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		fmt.Fprintf(f.IO.ErrOut, "error: %s\nRun '%s --help' for usage.\n", err, c.CommandPath())
		return exitUsage
	}
	var sf *sessionFailedError
	if errors.As(err, &sf) {
		fmt.Fprintf(f.IO.ErrOut, "error: %s\n", sf)
		return exitFailed
	}
	fmt.Fprintf(f.IO.ErrOut, "error: %s\n", userMessage(f, c, err))
	var ce codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitError
}

// codeError is a failure with an exit code of its own.
type codeError struct {
	code int
	error
}

func (e codeError) Unwrap() error { return e.error }

// programExit is the exit status of a program a command ran in its place
// (outpost operator), which wrote its own error.
type programExit struct{ code int }

func (e programExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in how a command was called.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// isCobraUsageError recognizes the errors cobra returns for unknown
// commands, which do not pass through the flag error function.
func isCobraUsageError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.HasPrefix(s, "unknown shorthand flag") || strings.Contains(s, "required flag(s)")
}

// exactArgs is cobra.ExactArgs with a usage error that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			if n == 0 {
				return usageErrorf("%s takes no arguments", cmd.CommandPath())
			}
			return usageErrorf("%s needs %s", cmd.CommandPath(), names)
		}
		return nil
	}
}
