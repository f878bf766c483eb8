package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// externalAccess is what the page of a running external session shows an
// outside agent's owner: the session's MCP endpoint and, once a token
// limited to the session is made, ready configurations of common clients.
type externalAccess struct {
	// URL is the session's MCP endpoint (Streamable HTTP).
	URL string
	// Name is the name the configurations give the MCP server.
	Name string
	// Secret is the token made for the session, shown once; "" before.
	Secret string
	// Claude is the `claude mcp add` line and JSON the mcpServers block
	// of clients configured by a file; both hold Secret.
	Claude, JSON string
}

// MCPServerName is the name a client's configuration gives the MCP server
// of session id.
func MCPServerName(id string) string { return "outpost-" + id }

// ClaudeMCPAdd is the command that adds session id's MCP endpoint to
// Claude Code, with token.
func ClaudeMCPAdd(id, endpoint, token string) string {
	return "claude mcp add --transport http " + MCPServerName(id) + " " + endpoint + ` --header "Authorization: Bearer ` + token + `"`
}

// MCPServersJSON is the mcpServers block of clients configured by a file
// (Cursor, Claude Desktop and others) for session id's MCP endpoint.
func MCPServersJSON(id, endpoint, token string) string {
	type server struct {
		Type    string            `json:"type"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	b, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]server{
		MCPServerName(id): {Type: "http", URL: endpoint, Headers: map[string]string{"Authorization": "Bearer " + token}},
	}}, "", "  ")
	return string(b)
}

// baseURL is the server's public base URL, else the one the request came
// in by.
func (h *Handler) baseURL(r *http.Request) string {
	if h.publicURL != "" {
		return h.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// externalFor is the external access of session s, nil when it is not an
// external session that can still run.
func (h *Handler) externalFor(r *http.Request, s api.Session, final bool) *externalAccess {
	if s.Spec.Agent.Kind != api.AgentExternal || final {
		return nil
	}
	id := s.Metadata.SessionID
	a := &externalAccess{URL: h.baseURL(r) + "/v1/sessions/" + url.PathEscape(id) + "/mcp", Name: MCPServerName(id)}
	if t, ok := r.Context().Value(sessionTokenKey{}).(*api.CreateTokenResponse); ok && t != nil {
		a.Secret = t.Secret
		a.Claude = ClaudeMCPAdd(id, a.URL, t.Secret)
		a.JSON = MCPServersJSON(id, a.URL, t.Secret)
	}
	return a
}

type sessionTokenKey struct{}

// sessionToken makes a token limited to the session (never the viewer's
// own token) and shows the session page with the clients' configurations
// holding it, this once.
func (h *Handler) sessionToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	req := api.CreateTokenRequest{Session: id, Name: "outside agent of " + id, Scopes: []string{api.ScopeSessionsWrite}}
	var created api.CreateTokenResponse
	if err := h.call(r, "POST", "/v1/tokens", req, &created); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	r = r.WithContext(context.WithValue(r.Context(), sessionTokenKey{}, &created))
	h.renderSession(w, r, http.StatusCreated, "", "A token limited to this session is made: it reaches nothing else and stops working when the session ends. It is shown only this once.")
}
