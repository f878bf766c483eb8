package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// MCPOptions are the settings of `outpost mcp`.
type MCPOptions struct {
	f *Factory
	// Session is the external session whose tools are served.
	Session string
}

// NewCmdMCP returns `outpost mcp`: a stdio MCP server bridged to a
// session's MCP endpoint, for MCP clients that only launch subprocesses.
// runF replaces the run in tests.
func NewCmdMCP(f *Factory, runF func(context.Context, *MCPOptions) error) *cobra.Command {
	opts := &MCPOptions{f: f}
	cmd := &cobra.Command{
		Use:   "mcp --session ID",
		Short: "Bridge stdio MCP to an external session's tools",
		Long: `Serve MCP on standard input and output, forwarding every request to the MCP
endpoint of an external session (/v1/sessions/ID/mcp): its tools run on the
machine that serves the session. The token needs the sessions.write scope.`,
		Example: `  outpost mcp --session devin-123
  # in an MCP client's configuration:
  #   {"command": "outpost", "args": ["mcp", "--session", "devin-123"],
  #    "env": {"` + api.EnvServer.Name + `": "https://outpost.example.com", "` + api.EnvToken.Name + `": "opt_..."}}`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Session == "" {
				return usageErrorf("mcp needs --session ID")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runMCP(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Session, "session", "", "the external session whose tools to serve")
	return cmd
}

// bearerTransport adds the API token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// mcpEndpoint returns the server and token outpost mcp uses. Unlike other
// commands it never mixes or guesses: a server given (--server or
// OUTPOST_SERVER) takes a token given, or the saved login's when that login
// is for the same server; a token given needs its server given; with
// neither, the saved login serves, and without one it is an error rather
// than the default local server. An MCP client shows only that its server
// failed to start, so each error says what to set.
func mcpEndpoint(f *Factory) (server, token string, err error) {
	serverGiven := f.Server != "" || f.Getenv(api.EnvServer.Name) != ""
	tokenGiven := f.Token != "" || f.TokenFile != "" || f.Getenv(api.EnvToken.Name) != "" || f.Getenv(api.EnvTokenFile.Name) != ""
	if tokenGiven && !serverGiven {
		return "", "", fmt.Errorf("a token is given but no server: set %s (or --server) to the server the token is for; outpost mcp does not pair a token with the saved login's server", api.EnvServer.Name)
	}
	if !serverGiven {
		cfg, err := loadConfig(f)
		if err != nil {
			return "", "", err
		}
		if cfg.Server == "" || cfg.Token == "" {
			return "", "", fmt.Errorf("no server to ask: set %s and %s (in the MCP client's configuration, under env), or run 'outpost login URL'", api.EnvServer.Name, api.EnvToken.Name)
		}
	}
	if server, token, err = f.Endpoint(); err != nil {
		return "", "", err
	}
	if token == "" {
		return "", "", fmt.Errorf("no token for %s: set %s (or --token, --token-file) to a token of that server, for example one from 'outpost tokens create --session ID'; the saved login is for another server", server, api.EnvToken.Name)
	}
	return server, token, nil
}

func runMCP(ctx context.Context, opts *MCPOptions) error {
	f, session := opts.f, opts.Session
	server, token, err := mcpEndpoint(f)
	if err != nil {
		return err
	}
	if err := checkMCPSession(ctx, f, session); err != nil {
		return fmt.Errorf("server %s: %w", server, err)
	}
	next := http.DefaultTransport
	if hc, err := f.HTTPClient(); err != nil { // --ca-file
		return err
	} else if hc != nil {
		next = hc.Transport
	}
	endpoint := strings.TrimRight(server, "/") + "/v1/sessions/" + url.PathEscape(session) + "/mcp"
	upstream := mcp.NewClient(&mcp.Implementation{Name: "outpost-mcp-bridge", Version: version}, nil)
	cs, err := upstream.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpoint, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, next: next}},
	}, nil)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("list the tools of %s: %w", endpoint, err)
	}
	local := mcp.NewServer(&mcp.Implementation{Name: "outpost", Title: "Outpost session " + session, Version: version}, nil)
	for _, t := range tools.Tools {
		name := t.Name
		local.AddTool(&mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments})
			})
	}
	return local.Run(ctx, &mcp.StdioTransport{})
}

// checkMCPSession fails with a sentence naming the session when it cannot
// serve MCP: it does not exist, is not external, or has ended. The MCP
// transport's own errors would say only that a request failed.
func checkMCPSession(ctx context.Context, f *Factory, id string) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Get(ctx, id)
	switch {
	case err != nil:
		return err
	case s.Spec.Agent.Kind != api.AgentExternal:
		return fmt.Errorf("session %s runs a %s agent; outpost mcp serves the tools of external sessions (agent.kind external)", id, s.Spec.Agent.Kind)
	case api.IsFinal(s.Status.Status):
		return fmt.Errorf("session %s has ended (%s)%s", id, statusText(s.Status.Status, s.Status.StatusDetail), reasonText(s.Status.Reason))
	}
	return nil
}
