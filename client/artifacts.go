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
	return s.c.download(ctx, sessionPath(sessionID)+"/artifacts/"+url.PathEscape(name), "artifact", w)
}

// download copies the body of GET path to w; what names the thing in
// errors. A body shorter than its Content-Length is an error, not a short
// copy. It is not retried: w may hold part of the body.
func (c *Client) download(ctx context.Context, path, what string, w io.Writer) error {
	req, err := c.newRequest(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "*/*")
	resp, err := c.http.Do(req)
	if err != nil {
		return &transportError{op: "GET " + path, err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return parseError(resp)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return &transportError{op: "GET " + path, err: fmt.Errorf("read %s: %w", what, err)}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return &transportError{op: "GET " + path, err: fmt.Errorf("%s cut short: got %d of %d bytes", what, n, resp.ContentLength)}
	}
	return nil
}
