package server

import (
	"regexp"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// The shapes public clients check ids against: one client skips every
// session whose id does not match sessionIDShape.
var (
	sessionIDShape = regexp.MustCompile(`^devin-[A-Za-z0-9-]+$`)
	outpostIDShape = regexp.MustCompile(`^outpost_env-`)
	// mintedSuffix is what follows the prefix: 80 random bits in
	// lower-case base32, so that names derived from an id stay DNS labels.
	mintedSuffix = regexp.MustCompile(`^[a-z2-7]{16}$`)
)

func TestNewIDsArePublicShaped(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		s, o := newSessionID(), newOutpostID()
		if !sessionIDShape.MatchString(s) || !mintedSuffix.MatchString(s[len(sessionIDPrefix):]) {
			t.Fatalf("session id %q is not devin- and 16 lower-case base32 characters", s)
		}
		if !outpostIDShape.MatchString(o) || !mintedSuffix.MatchString(o[len(outpostIDPrefix):]) {
			t.Fatalf("outpost id %q is not outpost_env- and 16 lower-case base32 characters", o)
		}
		if seen[s] || seen[o] {
			t.Fatalf("id minted twice: %q, %q", s, o)
		}
		seen[s], seen[o] = true, true
	}
}

// TestAPIMintsPublicShapedIDs creates an outpost and a session through
// both API prefixes and checks the ids they answer with.
func TestAPIMintsPublicShapedIDs(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	var o api.Outpost
	ts.mustDo(201, "POST", "/opbeta/outposts/outposts", ts.admin, api.CreateOutpostRequest{Name: "shaped", Platform: api.PlatformLinux}, &o)
	if !outpostIDShape.MatchString(o.Metadata.OutpostID) {
		t.Errorf("outpost id %q does not match %s", o.Metadata.OutpostID, outpostIDShape)
	}
	s := ts.session("shaped")
	if !sessionIDShape.MatchString(s.Metadata.SessionID) || s.Metadata.OutpostID != o.Metadata.OutpostID {
		t.Errorf("session %q of outpost %q, want a devin- id of %q", s.Metadata.SessionID, s.Metadata.OutpostID, o.Metadata.OutpostID)
	}
	var e api.QueueEntry
	ts.mustDo(200, "GET", "/opbeta/outposts/devins/"+s.Metadata.SessionID, ts.admin, nil, &e)
	if !sessionIDShape.MatchString(e.Metadata.SessionID) || !outpostIDShape.MatchString(e.Metadata.OutpostID) {
		t.Errorf("queue entry ids %q, %q", e.Metadata.SessionID, e.Metadata.OutpostID)
	}
	ts.mustDo(200, "GET", "/v1/outposts/"+o.Metadata.OutpostID, ts.admin, nil, nil)
}
