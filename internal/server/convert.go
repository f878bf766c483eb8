package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/lifecycle"
	"github.com/outpost-sh/outpost/internal/redact"
	"github.com/outpost-sh/outpost/internal/store"
)

func unixPtr(t *time.Time) *int64 {
	if t == nil || t.IsZero() {
		return nil
	}
	v := t.Unix()
	return &v
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toAPIOutpost(o store.Outpost, depth, claims int) api.Outpost {
	return api.Outpost{
		Metadata: api.OutpostMetadata{OutpostID: o.ID, AccountID: "local", CreatedAt: o.CreatedAt.Unix()},
		Spec: api.OutpostSpec{Name: o.Name, Platform: o.Platform, Description: o.Description, AllowedOrgIDs: o.AllowedOrgIDs,
			RemoteBinarySHA: strPtr(o.RemoteBinarySHA), MaxRunning: o.MaxRunning, MaxAttempts: cmp.Or(o.MaxAttempts, api.DefaultMaxAttempts),
			MaxSnapshotBytes: o.MaxSnapshotBytes, NetworkPolicy: o.NetworkPolicy, Desktop: o.Desktop, Requirements: o.Requirements,
			ApprovalRules: o.ApprovalRules},
		Status: api.OutpostStatus{QueueDepth: depth, ActiveClaims: claims},
	}
}

func toAPIEntry(e store.QueueEntry) api.QueueEntry {
	out := api.QueueEntry{
		Metadata: api.QueueMetadata{SessionID: e.SessionID, OutpostID: e.OutpostID, CreatedAt: e.CreatedAt.Unix(), UpdatedAt: e.UpdatedAt.Unix(),
			CreatedAtMS: e.CreatedAt.UnixMilli()},
		Spec: api.QueueSpec{Kind: e.Kind, Platform: e.Platform, RemoteBinarySHA: strPtr(e.RemoteBinarySHA), Priority: e.Priority,
			NetworkPolicy: e.NetworkPolicy, Requirements: e.Requirements},
		Status: api.QueueStatus{Phase: e.Phase, SessionStatus: e.SessionStatus, Attempts: e.Attempts,
			MaxAttempts: lifecycle.MaxAttempts(e)},
	}
	if e.Phase == api.PhaseClaimed {
		out.Status.AcceptorID = strPtr(e.AcceptorID)
		expiry := e.Expiry() // the time the claim lapses, its remote's liveness included
		out.Status.ClaimDeadline = unixPtr(&expiry)
	}
	return out
}

// toAPISession is the API view of a session: its secrets only by name, and
// their values redacted wherever the spec holds them (a step's arguments,
// the prompt, a repo URL).
func toAPISession(s store.Session) api.Session {
	red := redact.NewSet(s.Secrets)
	spec := redactSpec(red, s.Spec)
	spec.SecretNames = nil
	for name := range s.Secrets {
		spec.SecretNames = append(spec.SecretNames, name)
	}
	slices.Sort(spec.SecretNames)
	if spec.Repos == nil {
		spec.Repos = []api.Repo{}
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	if spec.SecretNames == nil {
		spec.SecretNames = []string{}
	}
	return api.Session{
		Metadata: api.SessionMetadata{SessionID: s.ID, OutpostID: s.OutpostID, CreatedAt: s.CreatedAt.Unix(), UpdatedAt: s.UpdatedAt.Unix()},
		Spec:     spec,
		Status: api.SessionStatus{
			Status:       s.Status,
			StatusDetail: s.StatusDetail,
			Reason:       red.String(s.Reason),
			Worker:       s.Worker,
			LastSeq:      s.LastSeq,
			StartedAt:    unixPtr(s.StartedAt),
			EndedAt:      unixPtr(s.EndedAt),
			Capabilities: s.Capabilities,
			Usage:        s.Usage,
			// Set by the artifact retention sweep (retention.go).
			ArtifactsPrunedAt: unixPtr(s.ArtifactsPrunedAt),
		},
	}
}

// redactSpec returns spec with every secret value in its strings replaced.
// A spec without one comes back as it is.
func redactSpec(set *redact.Set, spec api.SessionSpec) api.SessionSpec {
	if set == nil {
		return spec
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return spec
	}
	red := set.JSON(raw)
	if bytes.Equal(red, raw) {
		return spec
	}
	var out api.SessionSpec
	if err := json.Unmarshal(red, &out); err != nil {
		// Not expected: JSON redaction keeps the document's shape. Show
		// nothing rather than the secret.
		return api.SessionSpec{Outpost: spec.Outpost, Agent: api.Agent{Kind: spec.Agent.Kind}}
	}
	return out
}

func toAPIToken(t store.Token) api.Token {
	return api.Token{
		ID: t.ID, Name: t.Name, Scopes: t.Scopes, OutpostID: t.OutpostID, SessionID: t.SessionID, Role: t.Role, UserID: t.UserID,
		CreatedAt: t.CreatedAt.Unix(), ExpiresAt: unixPtr(t.ExpiresAt), RevokedAt: unixPtr(t.RevokedAt),
	}
}
