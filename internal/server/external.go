package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/agent"
)

// ToolEndSession ends an external session; outside agents call it when
// they are done.
const ToolEndSession = agent.ToolEndSession

// runnerStartWait bounds how long a tool call of an outside agent waits
// for the runner of a session that says it runs.
const runnerStartWait = 5 * time.Second

// callExternal runs one tool call of an outside agent through the
// session's runner and waits for its result.
func (s *Server) callExternal(ctx context.Context, sessionID, tool string, args json.RawMessage) (api.ToolResult, error) {
	if outpostID, ok := s.agents.ExternalOutpost(sessionID); ok && principalFrom(ctx).allowsOutpost(outpostID) {
		// The runner runs here: it knows the session's outpost, which
		// authorizes the call, and checks in the call's own transaction
		// that the session has not ended; no read of the session first.
		res, err := s.agents.External(ctx, sessionID, tool, args)
		if !errors.Is(err, agent.ErrNotRunning) {
			return externalAnswer(sessionID, res, err)
		}
	}
	sess, err := s.sessionFor(ctx, sessionID)
	if err != nil {
		return api.ToolResult{}, err
	}
	if sess.Spec.Agent.Kind != api.AgentExternal {
		return api.ToolResult{}, errConflict("Session %s runs a %s agent; only external sessions take tool calls from outside.", sessionID, sess.Spec.Agent.Kind)
	}
	if api.IsFinal(sess.Status) {
		return api.ToolResult{}, errConflict("Session %s has ended (%s).", sessionID, sess.Status)
	}
	res, err := s.agents.External(ctx, sessionID, tool, args)
	if errors.Is(err, agent.ErrNotRunning) && sess.Status == api.StatusRunning {
		// The remote's hello commits the status before its runner starts
		// (after the welcome): a client that saw "running" waits for it.
		wctx, cancel := context.WithTimeout(ctx, runnerStartWait)
		if s.agents.WaitRunning(wctx, sessionID) {
			res, err = s.agents.External(ctx, sessionID, tool, args)
		}
		cancel()
	}
	if errors.Is(err, agent.ErrNotRunning) {
		return api.ToolResult{}, &httpError{http.StatusServiceUnavailable, api.CodeUnavailable,
			fmt.Sprintf("Session %s has no machine connected yet (status %s); try again when it is running.", sessionID, sess.Status)}
	}
	return externalAnswer(sessionID, res, err)
}

// externalAnswer words the runner's answer to an outside agent's call.
func externalAnswer(sessionID string, res api.ToolResult, err error) (api.ToolResult, error) {
	var bad *agent.ToolCallError
	switch {
	case errors.Is(err, agent.ErrEnded):
		return api.ToolResult{}, errConflict("Session %s has ended.", sessionID)
	case errors.Is(err, agent.ErrEndedDuringCall):
		return api.ToolResult{}, errConflict("Session %s ended while the call ran.", sessionID)
	case errors.As(err, &bad):
		return api.ToolResult{}, errBadRequest("%s", bad.Problem)
	}
	return res, err
}

// toolHandler answers POST /v1/sessions/{id}/tools/{tool}: the body is the
// tool's arguments.
func (s *Server) toolHandler(w http.ResponseWriter, r *http.Request) error {
	var args json.RawMessage
	if err := decodeOptional(w, r, &args); err != nil {
		return err
	}
	res, err := s.callExternal(r.Context(), r.PathValue("session"), r.PathValue("tool"), args)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// mcpHandler serves each session's MCP endpoint (Streamable HTTP,
// stateless): its tools are the remote's and end_session.
func (s *Server) mcpHandler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return s.mcpServer(r.PathValue("session"))
	}, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: s.log})
	return h
}

// mcpServer builds the MCP server of one session.
func (s *Server) mcpServer(sessionID string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "outpost", Title: "Outpost session " + sessionID, Version: "1"}, nil)
	for _, t := range api.Tools() {
		srv.AddTool(&mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}, s.mcpTool(sessionID, t.Name))
	}
	srv.AddTool(&mcp.Tool{Name: ToolEndSession, Description: "End the session when the work is done. Its machine is released.",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)}, s.mcpTool(sessionID, ToolEndSession))
	return srv
}

func (s *Server) mcpTool(sessionID, tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := s.callExternal(ctx, sessionID, tool, req.Params.Arguments)
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: he.message}}}, nil
			}
			return nil, err
		}
		text := res.Output // holds the error too
		if text == "" && len(res.Value) > 0 {
			text = string(res.Value)
		}
		content := []mcp.Content{&mcp.TextContent{Text: text}}
		if img := computerImage(tool, res); img != nil {
			// The screenshot as MCP image content, which clients show to
			// their model as an image rather than as base64 text.
			var value api.ComputerResult
			_ = json.Unmarshal(res.Value, &value)
			value.Image = nil
			meta, _ := json.Marshal(value)
			content = []mcp.Content{img, &mcp.TextContent{Text: string(meta)}}
		} else if img := s.artifactImage(ctx, sessionID, tool, res); img != nil {
			// A screenshot the tool stored as an artifact (browser_screenshot,
			// an uploaded image): the image itself, then what the tool said,
			// which names the artifact.
			content = []mcp.Content{img, content[0]}
		}
		return &mcp.CallToolResult{IsError: !res.OK, Content: content}, nil
	}
}

// computerImage is the image of a successful computer call's result, nil
// for any other.
func computerImage(tool string, res api.ToolResult) *mcp.ImageContent {
	if tool != api.ToolComputer || !res.OK {
		return nil
	}
	var v api.ComputerResult
	if json.Unmarshal(res.Value, &v) != nil || v.Image == nil {
		return nil
	}
	data, err := base64.StdEncoding.DecodeString(v.Image.Data)
	if err != nil {
		return nil
	}
	return &mcp.ImageContent{Data: data, MIMEType: v.Image.MediaType}
}

// mcpImageMax is the largest image an MCP tool result carries inline;
// a larger one is left to its artifact download.
const mcpImageMax = 8 << 20

// mcpImageTypes are the image types MCP clients show to models.
var mcpImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// artifactImage is the image a successful tool call stored as an artifact
// of the session — value.artifact of a browser_screenshot, or the
// artifact upload_artifact made — read from the artifact store; nil when
// the result holds none, it is not an image, is too large or is gone.
func (s *Server) artifactImage(ctx context.Context, sessionID, tool string, res api.ToolResult) *mcp.ImageContent {
	if !res.OK || len(res.Value) == 0 {
		return nil
	}
	var ref *api.ArtifactRef
	var file struct {
		Artifact *api.ArtifactRef `json:"artifact"`
	}
	if tool == api.ToolUploadArtifact {
		ref = new(api.ArtifactRef)
		if json.Unmarshal(res.Value, ref) != nil {
			return nil
		}
	} else if json.Unmarshal(res.Value, &file) == nil {
		ref = file.Artifact
	}
	if ref == nil || api.ValidateArtifactName(ref.Name) != nil || ref.Size > mcpImageMax || !slices.Contains(mcpImageTypes, ref.ContentType) {
		return nil
	}
	f, _, err := s.artifactBlobs.Get(ctx, artifactKey(sessionID, ref.Name))
	if err != nil {
		s.log.Warn("mcp: read the image artifact", "session", sessionID, "artifact", ref.Name, "err", err)
		return nil
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, mcpImageMax+1))
	if err != nil || len(data) > mcpImageMax {
		return nil
	}
	return &mcp.ImageContent{Data: data, MIMEType: ref.ContentType}
}
