package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// ArtifactsService lists and downloads the files sessions uploaded with the
// upload_artifact tool.
type ArtifactsService struct{ c *Client }

// List returns the artifacts of a session, sorted by name.
func (s *ArtifactsService) List(ctx context.Context, sessionID string) (*api.ArtifactList, error) {
	var out api.ArtifactList
	if err := s.c.do(ctx, http.MethodGet, sessionPath(sessionID)+"/artifacts", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Items == nil {
		out.Items = []api.Artifact{}
	}
	return &out, nil
}

// Get writes the bytes of a session's artifact to w.
func (s *ArtifactsService) Get(ctx context.Context, sessionID, name string, w io.Writer) error {
	path := sessionPath(sessionID) + "/artifacts/" + url.PathEscape(name)
	req, err := s.c.newRequest(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := s.c.http.Do(req)
	if err != nil {
		return &transportError{op: "GET " + path, err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return parseError(resp)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return &transportError{op: "GET " + path, err: fmt.Errorf("read artifact: %w", err)}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return &transportError{op: "GET " + path, err: fmt.Errorf("artifact cut short: got %d of %d bytes", n, resp.ContentLength)}
	}
	return nil
}
